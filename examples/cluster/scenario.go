package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Scenario is one run: producers publish on sessions, nodes apply, one node
// is killed halfway.
type Scenario struct {
	URL       string // NATS server; empty starts an embedded one
	Nodes     int
	Producers int
	Sessions  int
	Messages  int // in all; a multiple of Sessions
	HighEvery int // every HighEvery-th message is High; 0 for none
	Kill      bool
	Topology  Topology
	Log       io.Writer // progress lines; nil for none

	// Tests' hooks. onApplied, if set, is called after each message is
	// applied, with the count so far, outside the store's lock. produce
	// replaces Produce.
	onApplied func(applied int)
	produce   func(ctx context.Context, url, name string, sessions []string, perSession, highEvery int) error
}

// Result is what a run measured.
type Result struct {
	Report            // the store's audit
	Server     string // server version and URL
	Sent       int    // messages stored by the stream when the run ended
	Lost       int    // sent but never applied
	Killed     string // the killed node, if any
	KilledAt   int    // messages applied when it was killed
	Elapsed    time.Duration
	Throughput float64 // applied messages per second, first publish to last application
	Nodes      map[string]NodeStats
}

func (sc Scenario) validate() error {
	switch {
	case sc.Nodes < 1 || (sc.Kill && sc.Nodes < 2):
		return fmt.Errorf("cluster: %d nodes; need 1, or 2 to kill one", sc.Nodes)
	case sc.Producers < 1 || sc.Sessions < sc.Producers:
		return fmt.Errorf("cluster: %d producers for %d sessions", sc.Producers, sc.Sessions)
	case sc.Messages < sc.Sessions || sc.Messages%sc.Sessions != 0:
		return fmt.Errorf("cluster: %d messages must be a multiple of %d sessions", sc.Messages, sc.Sessions)
	}
	return sc.Topology.validate()
}

// Run runs sc until every message is applied or ctx ends, then stops the
// nodes and reports. Whatever ends the run once the nodes' store exists (all
// applied, ctx's end, a producer's or a node's failure), the Result accounts
// for it: what the stream stored (Sent), what was applied and how, and the
// nodes' counters. A Result with Lost > 0 comes with the error that ended
// the run early.
func Run(ctx context.Context, sc Scenario) (res Result, err error) {
	if err := sc.validate(); err != nil {
		return res, err
	}
	logf := func(format string, args ...any) {
		if sc.Log != nil {
			fmt.Fprintf(sc.Log, format+"\n", args...)
		}
	}
	url := sc.URL
	if url == "" {
		dir, err := os.MkdirTemp("", "seqsched-cluster-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		srv, err := StartEmbedded(dir)
		if err != nil {
			return res, err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
		res.Server = fmt.Sprintf("embedded nats-server %s at %s", server.VERSION, url)
	}

	admin, err := nats.Connect(url, nats.Name("admin"), nats.NoReconnect())
	if err != nil {
		return res, fmt.Errorf("cluster: %w", err)
	}
	defer admin.Close()
	if res.Server == "" {
		res.Server = fmt.Sprintf("nats-server %s at %s", admin.ConnectedServerVersion(), url)
	}
	js, err := jetstream.New(admin)
	if err != nil {
		return res, err
	}
	if err := Setup(ctx, js, sc.Topology); err != nil {
		return res, err
	}
	logf("%s: stream %s, %d partitions, %d nodes", res.Server, sc.Topology.Stream, sc.Topology.Partitions, sc.Nodes)

	r := &runState{sc: sc, url: url, logf: logf, store: NewStore(), nodes: make(map[string]*Node, sc.Nodes)}
	r.store.onApplied = sc.onApplied
	runErr := r.drive(ctx, &res)
	err = r.finish(ctx, js, &res) // waits for the producers
	if r.perr != nil && !errors.Is(runErr, r.perr) {
		runErr = errors.Join(runErr, r.perr) // failed after the run's end was decided
	}
	return res, errors.Join(runErr, err)
}

// runState is one Run once the store exists: the nodes, the producers,
// and what [runState.finish] needs to account for them whatever happened.
type runState struct {
	sc    Scenario
	url   string
	logf  func(format string, args ...any)
	store *Store
	nodes map[string]*Node // running: killed or stopped ones are removed

	start     time.Time               // first publish
	producers sync.WaitGroup          // Produce calls running
	cancel    context.CancelCauseFunc // ends the producers, with the first one's failure as the cause
	perrMu    sync.Mutex
	perr      error // the first producer failure not caused by the run's end
}

// drive starts the nodes and the producers, kills a node halfway if asked,
// and waits until every message is applied. A producer's failure ends the
// wait at once, with its error.
func (r *runState) drive(ctx context.Context, res *Result) error {
	sc := r.sc
	ctx, r.cancel = context.WithCancelCause(ctx)
	for i := range sc.Nodes {
		var mine []int
		for p := i; p < sc.Topology.Partitions; p += sc.Nodes {
			mine = append(mine, p)
		}
		name := fmt.Sprintf("node-%d", i+1)
		n, err := StartNode(ctx, NodeConfig{Name: name, URL: r.url, Topology: sc.Topology, Store: r.store, Preferred: mine})
		if err != nil {
			return err
		}
		r.nodes[name] = n
	}
	for _, n := range r.nodes {
		if err := n.Join(ctx); err != nil {
			return err
		}
	}

	produce := sc.produce
	if produce == nil {
		produce = Produce
	}
	perProducer := make([][]string, sc.Producers)
	for i := range sc.Sessions {
		perProducer[i%sc.Producers] = append(perProducer[i%sc.Producers], fmt.Sprintf("s%05d", i))
	}
	r.start = time.Now()
	for i, sessions := range perProducer {
		r.producers.Go(func() {
			err := produce(ctx, r.url, fmt.Sprintf("producer-%d", i+1), sessions, sc.Messages/sc.Sessions, sc.HighEvery)
			if err == nil || ctx.Err() != nil {
				return // done, or stopped by the run's end (whose error Run returns)
			}
			r.perrMu.Lock()
			if r.perr == nil {
				r.perr = err
			}
			r.perrMu.Unlock()
			r.cancel(err) // the run cannot complete: stop waiting for it
		})
	}

	if sc.Kill {
		if err := r.store.Wait(ctx, sc.Messages/2); err != nil {
			return context.Cause(ctx)
		}
		var victim *Node // the busiest node, so that the kill moves partitions
		for _, n := range r.nodes {
			if victim == nil || n.Stats().Delivered > victim.Stats().Delivered {
				victim = n
			}
		}
		res.KilledAt = r.store.Report().Applied
		victim.Kill()
		res.Killed = victim.name
		res.Nodes = map[string]NodeStats{victim.name: victim.Stats()}
		delete(r.nodes, victim.name)
		r.logf("killed %s at %d applied; its partitions move after PinnedTTL %v", victim.name, res.KilledAt, sc.Topology.PinnedTTL)
	}
	if err := r.store.Wait(ctx, sc.Messages); err != nil {
		return context.Cause(ctx)
	}
	return nil
}

// finish ends the producers, stops the running nodes gracefully (late
// redeliveries are applied or skipped before the report), and fills res
// from the store, the stream and the nodes. It returns the nodes' errors,
// and any from counting what the stream stored.
func (r *runState) finish(ctx context.Context, js jetstream.JetStream, res *Result) error {
	if r.cancel != nil {
		r.cancel(nil)
	}
	r.producers.Wait()
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	if res.Nodes == nil {
		res.Nodes = make(map[string]NodeStats)
	}
	for name, n := range r.nodes {
		errs = append(errs, n.Stop(stop))
		res.Nodes[name] = n.Stats()
		delete(r.nodes, name)
	}
	res.Report = r.store.Report()
	count, cancelCount := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second) // not what the nodes left of stop
	defer cancelCount()
	if info, err := stream(count, js, r.sc.Topology.Stream); err != nil {
		errs = append(errs, fmt.Errorf("cluster: counting the messages sent: %w", err))
	} else {
		res.Sent = int(info.State.Msgs)
	}
	res.Lost = max(0, res.Sent-res.Applied)
	if !r.start.IsZero() && !res.Last.IsZero() {
		res.Elapsed = res.Last.Sub(r.start)
	}
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Applied) / res.Elapsed.Seconds()
	}
	return errors.Join(errs...)
}

// stream returns the stream's current state.
func stream(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}
