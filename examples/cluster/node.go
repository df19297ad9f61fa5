package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/seqsched/seqsched"
)

// NodeConfig configures a [Node].
type NodeConfig struct {
	Name     string // connection name, for monitoring
	URL      string // NATS server URL
	Topology Topology
	Store    *Store // where messages are applied

	// Preferred are the partitions the node pulls from at StartNode; it
	// pulls from the others only after [Node.Join]. The server pins a
	// partition to the first node whose pull is waiting when a message
	// arrives, so starting every node with its share and joining later
	// spreads the partitions.
	Preferred []int

	// Submitted, if set, is called after each message is queued on the
	// scheduler, from the partition's delivery goroutine. Tests use it.
	Submitted func(Message)
}

// Node is one process of the cluster: it pulls from every partition's
// consumer in the "owners" priority group, receives messages only from the
// partitions the server has pinned to it, queues each message on a
// [seqsched.Scheduler] keyed by session in delivery order (High ones on the
// High lane), and acknowledges a message only after its task applied it.
//
// Each partition is pulled by a loop of Fetch calls, one goroutine per
// partition that the node owns and waits for. nats.go's Consume would do the
// looping, but in nats.go v1.53.1 (jetstream/pull.go, unchanged on its main
// branch as of this writing) stopping it can deadlock: once Stop or Drain has
// ended the goroutine that sends pull requests, a message or status reply
// still being delivered can make pullSubscription.checkPending send a second
// request on the one-slot fetchNext channel, which nobody reads any more,
// while it holds the subscription's lock. The delivery goroutine then never
// returns, the consumer never closes, and ConsumeContext.Closed, which takes
// that lock, blocks for ever. Standby pulls get a status reply for every pin
// change, and with 1000 partitions (3000 consumers) every shutdown we tried
// hung on it, with Drain (2 of 2) and with Stop (3 of 3). Fetch has no such
// goroutine to lose: each fetch ends by itself within PullExpiry (and a
// second, which the client waits past the server's expiry so as not to miss
// a delivery that is on its way).
type Node struct {
	name      string
	topo      Topology
	nc        *nats.Conn
	js        jetstream.JetStream
	sched     *seqsched.Scheduler[string]
	store     *Store
	submitted func(Message)

	loops    sync.WaitGroup     // fetch loops running
	draining chan struct{}      // closed by Stop: each loop ends after its current fetch
	killed   context.Context    // canceled by Kill: each loop ends after its current fetch
	kill     context.CancelFunc // cancels killed

	mu       sync.Mutex
	stopped  bool           // Stop or Kill was called: no new loops
	fetching map[int]bool   // partitions with a fetch loop
	pinned   map[int]string // partition → pin ID on the last message delivered here

	delivered   atomic.Int64 // messages delivered to this node
	redelivered atomic.Int64 // of those, deliveries after the first
	early       atomic.Int64 // deliveries sent back as Early
	failed      atomic.Int64 // tasks whose ack or nak could not be sent
}

// StartNode connects to cfg.URL and starts pulling from cfg.Preferred.
// Stop it with [Node.Stop] or [Node.Kill]. The connection does not
// reconnect: a node that loses it stops receiving, as a crashed one would,
// and its partitions move. A production node would reconnect and pull
// again, and keep its partitions if it is back within PinnedTTL.
func StartNode(ctx context.Context, cfg NodeConfig) (*Node, error) {
	if err := cfg.Topology.validate(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.URL, nats.Name(cfg.Name), nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // slow-consumer etc. surface as redeliveries
	if err != nil {
		return nil, fmt.Errorf("cluster: node %s: %w", cfg.Name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: node %s: %w", cfg.Name, err)
	}
	sched, err := seqsched.New[string]()
	if err != nil {
		nc.Close()
		return nil, err
	}
	n := &Node{
		name: cfg.Name, topo: cfg.Topology, nc: nc, js: js, sched: sched, store: cfg.Store,
		submitted: cfg.Submitted, draining: make(chan struct{}),
		fetching: make(map[int]bool), pinned: make(map[int]string),
	}
	n.killed, n.kill = context.WithCancel(context.Background())
	if err := n.pull(ctx, cfg.Preferred); err != nil {
		n.Kill()
		return nil, err
	}
	return n, nil
}

// Join starts pulling from the partitions not yet pulled from, as a standby:
// the node receives from them only once their owner is gone.
func (n *Node) Join(ctx context.Context) error {
	all := make([]int, n.topo.Partitions)
	for p := range all {
		all[p] = p
	}
	return n.pull(ctx, all)
}

// pull starts a fetch loop on each partition in ps not yet pulled from.
// Each loop's first pull request is sent here, and flushed, so that the
// server has seen them all when pull returns.
func (n *Node) pull(ctx context.Context, ps []int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return fmt.Errorf("cluster: node %s: stopped", n.name)
	}
	for _, p := range ps {
		if p < 0 || p >= n.topo.Partitions {
			return fmt.Errorf("cluster: node %s: partition %d out of range", n.name, p)
		}
		if n.fetching[p] {
			continue
		}
		cons, err := n.js.Consumer(ctx, n.topo.Stream, n.topo.consumer(p))
		if err != nil {
			return fmt.Errorf("cluster: node %s: %w", n.name, err)
		}
		batch, err := n.fetch(cons)
		if err != nil {
			return fmt.Errorf("cluster: node %s: fetch %s: %w", n.name, n.topo.consumer(p), err)
		}
		n.fetching[p] = true
		n.loops.Go(func() { n.fetchLoop(p, cons, batch) }) // ends at Stop or Kill, which wait for it
	}
	return flush(ctx, n.nc)
}

// maxBatch bounds the messages one fetch asks for: an idle standby's fetch
// allocates room for its whole batch every PullExpiry.
const maxBatch = 256

// fetch sends one pull request in the owners group, which the server ends
// after PullExpiry. The client waits a second longer for the server's
// answer: ending a fetch on the client's side first would leave the server
// delivering to an inbox nobody reads, and those messages would come back
// only after AckWait.
func (n *Node) fetch(cons jetstream.Consumer) (jetstream.MessageBatch, error) {
	return cons.Fetch(min(n.topo.MaxAckPending, maxBatch),
		jetstream.FetchPriorityGroup(group), jetstream.FetchMaxWait(n.topo.PullExpiry))
}

// fetchLoop hands partition p's messages to the handler in delivery order,
// one batch after the other, until Stop or Kill (after the current batch,
// which ends within PullExpiry and a second), or until a fetch fails: the
// connection is gone, and the node serves the partition no more, as a
// crashed one would.
func (n *Node) fetchLoop(p int, cons jetstream.Consumer, batch jetstream.MessageBatch) {
	handle := n.handler(p)
	for {
		for msg := range batch.Messages() {
			handle(msg)
		}
		// A batch ends on its expiry, a full count or a pin change: all
		// mean fetch again.
		select {
		case <-n.draining:
			return
		case <-n.killed.Done():
			return
		default:
		}
		var err error
		if batch, err = n.fetch(cons); err != nil {
			return
		}
	}
}

// flush waits until the server has processed what nc sent, within ctx's
// deadline or nats.go's default timeout.
func flush(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); ok {
		return nc.FlushWithContext(ctx)
	}
	return nc.Flush()
}

// handler returns partition p's delivery callback. The partition's fetch
// loop calls it on its one goroutine, in delivery order, so queuing here
// keeps each session's messages in the order the server delivered them.
func (n *Node) handler(p int) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		m, meta, err := decode(msg, p)
		if err != nil {
			_ = msg.Term() // malformed: redelivering it cannot help
			return
		}
		n.delivered.Add(1)
		if meta.NumDelivered > 1 {
			n.redelivered.Add(1)
		}
		if pin := msg.Headers().Get("Nats-Pin-Id"); pin != "" {
			n.mu.Lock()
			n.pinned[p] = pin
			n.mu.Unlock()
		}
		prio := seqsched.Normal
		if m.High {
			prio = seqsched.High
		}
		// The future is not awaited: the ack is the task's outcome. If the
		// node is stopping, Go fails, the message stays unacknowledged and
		// the partition's next owner gets it again.
		_, err = n.sched.Go(context.Background(), m.Session, func(context.Context) error {
			var err error
			switch n.store.Apply(m) {
			case Applied, Duplicate:
				err = msg.Ack()
			case Early:
				// Its predecessor is still on its way back: let JetStream
				// redeliver this one after it. The session's later messages,
				// queued behind this task, will be Early too and follow.
				n.early.Add(1)
				err = msg.NakWithDelay(n.topo.RetryDelay)
			}
			if err != nil {
				n.failed.Add(1)
			}
			return err
		}, prio)
		if err == nil && n.submitted != nil {
			n.submitted(m)
		}
	}
}

// decode reads a delivered message.
func decode(msg jetstream.Msg, p int) (Message, *jetstream.MsgMetadata, error) {
	meta, err := msg.Metadata()
	if err != nil {
		return Message{}, nil, err
	}
	subj := msg.Subject() // part.<p>.<session>
	i := strings.LastIndexByte(subj, '.')
	if i < 0 {
		return Message{}, nil, fmt.Errorf("cluster: subject %q: no session token", subj)
	}
	h := msg.Headers()
	seq, err := strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
	if err != nil {
		return Message{}, nil, fmt.Errorf("cluster: header %s: %w", HeaderSeq, err)
	}
	m := Message{Session: subj[i+1:], Partition: p, StreamSeq: meta.Sequence.Stream,
		High: h.Get(HeaderPriority) == "high", Seq: seq}
	if ns, err := strconv.ParseInt(h.Get(HeaderSent), 10, 64); err == nil {
		m.Sent = time.Unix(0, ns)
	}
	return m, meta, nil
}

// Kill stops the node as a crash would: the connection drops at once, so
// nothing more is delivered or acknowledged, queued tasks are dropped and
// running ones finish without being able to ack. The server keeps the
// node's partitions pinned to it until PinnedTTL, then pins a survivor,
// which receives every unacknowledged message again (deduplicated by the
// Store) before new ones. Kill returns once the node's goroutines have: a
// fetch in flight ends by itself within PullExpiry and a second (nats.go
// does not end it when the connection closes).
func (n *Node) Kill() {
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	n.kill()
	n.nc.Close()
	n.loops.Wait()
	aborted, cancel := context.WithCancel(context.Background())
	cancel()
	_ = n.sched.Shutdown(aborted)              // gives up at once: queued tasks dropped
	_ = n.sched.Shutdown(context.Background()) // waits for the running ones
}

// Stop stops the node gracefully: it stops pulling (every message already
// delivered to it is handled: its fetches end within PullExpiry and a
// second), runs and acknowledges every task queued, then unpins the
// partitions still pinned to it so that a survivor takes them over at once
// rather than after PinnedTTL. If ctx ends first, Stop returns its error
// after killing the node. Call it once.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	close(n.draining)
	loopsDone := make(chan struct{})
	go func() { // ends when the loops do: within PullExpiry and a second
		n.loops.Wait()
		close(loopsDone)
	}()
	select {
	case <-loopsDone:
	case <-ctx.Done():
		n.Kill()
		<-loopsDone
		return ctx.Err()
	}
	if err := n.sched.Shutdown(ctx); err != nil {
		n.Kill()
		return err
	}
	err := flush(ctx, n.nc) // the acks reach the server before the unpin
	if err == nil {
		n.mu.Lock()
		pinned := maps.Clone(n.pinned)
		n.mu.Unlock()
		err = n.unpin(ctx, pinned)
	}
	n.nc.Close()
	return err
}

// unpin releases the partitions whose current pin is the one this node was
// last given, leaving alone those the server has already moved.
func (n *Node) unpin(ctx context.Context, pinned map[int]string) error {
	stream, err := n.js.Stream(ctx, n.topo.Stream)
	if err != nil {
		return err
	}
	var errs []error
	for p, pin := range pinned {
		cons, err := stream.Consumer(ctx, n.topo.consumer(p))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, g := range cons.CachedInfo().PriorityGroups {
			if g.Group == group && g.PinnedClientID == pin {
				errs = append(errs, stream.UnpinConsumer(ctx, n.topo.consumer(p), group))
			}
		}
	}
	return errors.Join(errs...)
}

// Scheduler returns the node's scheduler, so that tests can gate a session.
func (n *Node) Scheduler() *seqsched.Scheduler[string] { return n.sched }

// NodeStats are a node's delivery counters.
type NodeStats struct {
	Delivered   int64 // messages delivered to the node
	Redelivered int64 // of those, deliveries after the first
	Early       int64 // deliveries sent back because a predecessor was missing
	AckFailed   int64 // tasks that could not ack (or nak): the node was gone
	Partitions  int   // partitions the node has received messages from
}

// Stats returns the node's counters.
func (n *Node) Stats() NodeStats {
	n.mu.Lock()
	parts := len(n.pinned)
	n.mu.Unlock()
	return NodeStats{Delivered: n.delivered.Load(), Redelivered: n.redelivered.Load(),
		Early: n.early.Load(), AckFailed: n.failed.Load(), Partitions: parts}
}
