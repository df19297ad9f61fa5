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
}

// Result is what a run measured.
type Result struct {
	Report            // the store's audit
	Server     string // server version and URL
	Sent       int    // messages stored by the stream
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
// nodes and reports. A Result with Lost > 0 comes with ctx's error.
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

	store := NewStore()

	nodes := make(map[string]*Node, sc.Nodes)
	defer func() { // whatever happened, no node outlives the run
		for _, n := range nodes {
			n.Kill()
		}
	}()
	for i := range sc.Nodes {
		var mine []int
		for p := i; p < sc.Topology.Partitions; p += sc.Nodes {
			mine = append(mine, p)
		}
		name := fmt.Sprintf("node-%d", i+1)
		n, err := StartNode(ctx, NodeConfig{Name: name, URL: url, Topology: sc.Topology, Store: store, Preferred: mine})
		if err != nil {
			return res, err
		}
		nodes[name] = n
	}
	for _, n := range nodes {
		if err := n.Join(ctx); err != nil {
			return res, err
		}
	}

	perProducer := make([][]string, sc.Producers)
	for i := range sc.Sessions {
		perProducer[i%sc.Producers] = append(perProducer[i%sc.Producers], fmt.Sprintf("s%05d", i))
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		perr error
	)
	for i, sessions := range perProducer {
		wg.Go(func() {
			err := Produce(ctx, url, fmt.Sprintf("producer-%d", i+1), sessions, sc.Messages/sc.Sessions, sc.HighEvery)
			mu.Lock()
			perr = errors.Join(perr, err)
			mu.Unlock()
		})
	}
	defer wg.Wait()

	if sc.Kill {
		if err := store.Wait(ctx, sc.Messages/2); err != nil {
			return res, err
		}
		var victim *Node // the busiest node, so that the kill moves partitions
		for _, n := range nodes {
			if victim == nil || n.Stats().Delivered > victim.Stats().Delivered {
				victim = n
			}
		}
		res.KilledAt = store.Report().Applied
		victim.Kill()
		res.Killed = victim.name
		res.Nodes = map[string]NodeStats{victim.name: victim.Stats()}
		delete(nodes, victim.name)
		logf("killed %s at %d applied; its partitions move after PinnedTTL %v", victim.name, res.KilledAt, sc.Topology.PinnedTTL)
	}

	waitErr := store.Wait(ctx, sc.Messages)
	wg.Wait()
	if perr != nil {
		return res, perr
	}
	res.Sent = sc.Messages
	if res.Nodes == nil {
		res.Nodes = make(map[string]NodeStats)
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for name, n := range nodes { // graceful: late redeliveries are applied (or skipped) before the report
		err = errors.Join(err, n.Stop(stop))
		res.Nodes[name] = n.Stats()
		delete(nodes, name)
	}
	res.Report = store.Report()
	res.Lost = res.Sent - res.Applied
	res.Elapsed = res.Last.Sub(start)
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Applied) / res.Elapsed.Seconds()
	}
	return res, errors.Join(waitErr, err)
}
