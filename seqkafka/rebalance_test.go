package seqkafka_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seqsched/seqsched/seqkafka"
)

// gate holds handlers of chosen offsets until opened.
type gate struct {
	open    chan struct{}
	entered chan int64 // offsets that reached the gate
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan int64, 64)} }

func (g *gate) wait(ctx context.Context, off int64) error {
	g.entered <- off
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestRevokedPartitionFinishesInFlightBeforeItsCommit(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "0"), rec(0, "a", "1"), rec(0, "b", "2")})
	st := newStore()
	w := watchCommits(c)
	var committedBeforeApplied atomic.Bool
	w.check = func(part int32, offset int64, _ string) {
		for o := int64(0); o < offset; o++ {
			if !st.isApplied(part, o) {
				committedBeforeApplied.Store(true)
			}
		}
	}
	g := newGate()
	logs := newLogSink()
	a, err := seqkafka.NewConsumer(groupOpts(c, kgo.Balancers(kgo.RangeBalancer())),
		func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 0 {
				if err := g.wait(ctx, r.Offset); err != nil {
					return err
				}
			}
			st.apply(r)
			return nil
		}, seqkafka.WithLogger(logs.logger()), seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	ma := startMember(t, a)
	<-g.entered // offset 0 is in flight on a

	// b joins: with the eager range balancer a must revoke its partition.
	var bApplied atomic.Int32
	b, err := seqkafka.NewConsumer(groupOpts(c, kgo.Balancers(kgo.RangeBalancer())),
		func(ctx context.Context, r *kgo.Record) error {
			bApplied.Add(1)
			st.apply(r)
			return nil
		}, seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	mb := startMember(t, b)
	<-logs.when("draining revoked partitions")
	require.Empty(t, w.all(), "a committed before its in-flight record finished")

	// a's revocation commits 3 once all three are applied; b then owns
	// the partition from offset 3 and has nothing to do. The watch is in
	// place before the gate opens: the commit may follow at once.
	commitAt3 := make(chan struct{})
	var once sync.Once
	w.mu.Lock()
	prev := w.check
	w.check = func(part int32, offset int64, meta string) {
		prev(part, offset, meta)
		if offset == 3 {
			once.Do(func() { close(commitAt3) })
		}
	}
	w.mu.Unlock()
	close(g.open)
	select {
	case <-commitAt3:
	case <-time.After(20 * time.Second):
		t.Fatalf("no commit of offset 3; commits %v", w.all())
	}
	require.NoError(t, ma.close(t, 10*time.Second))
	require.NoError(t, mb.close(t, 10*time.Second))
	require.False(t, committedBeforeApplied.Load(), "a commit passed an unapplied offset: %v", w.all())
	require.Zero(t, bApplied.Load(), "b replayed records a had finished")
}

func TestLostPartitionCommitsNothing(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "0"), rec(0, "b", "1"), rec(0, "b", "2")})
	st := newStore()
	w := watchCommits(c)
	g := newGate()
	var handled atomic.Int32
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			if err := g.wait(ctx, r.Offset); err != nil {
				return err
			}
		}
		handled.Add(1)
		st.apply(r)
		return nil
	}, seqkafka.WithCommitInterval(time.Hour), seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered // offset 0 in flight; 1 and 2 (key b) finish on their own
	<-st.at(2)

	// The coordinator now says the member is unknown: kgo reports the
	// partition lost. Offsets 1 and 2 are done and 0 is not; a commit now
	// would carry them in its metadata.
	var fenced atomic.Bool
	c.ControlKey(int16(kmsg.Heartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		if fenced.Swap(true) {
			return nil, nil, false
		}
		resp := kmsg.NewPtrHeartbeatResponse()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	// The lost assignment's handler sees its ctx canceled; the member
	// rejoins, gets the partition again and, with nothing committed,
	// starts over at offset 0.
	<-g.entered
	require.Empty(t, w.all(), "a lost partition was committed")
	close(g.open)
	<-st.at(3)
	require.NoError(t, m.close(t, 10*time.Second))
	require.GreaterOrEqual(t, handled.Load(), int32(5), "records 1 and 2 were not replayed after the loss")
}

// A rebalance that other members start while Close runs (they leave at the
// same moment) can make the broker refuse the final commit as coming from
// a generation that is over. The partition is then lost, its offsets its
// next owner's: Close logs it and reports no failure of its own.
func TestCloseLeavesAPartitionARebalanceTookToItsNextOwner(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.IllegalGeneration, kerr.RebalanceInProgress} {
		t.Run(code.Message, func(t *testing.T) {
			c := cluster(t, 1)
			produce(t, c, []*kgo.Record{rec(0, "a", ""), rec(0, "b", "")})
			st := newStore()
			logs := newLogSink()
			cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
				st.apply(r)
				return nil
			}, seqkafka.WithCommitInterval(time.Hour), seqkafka.WithLogger(logs.logger()))
			require.NoError(t, err)
			m := startMember(t, cons)
			<-st.at(2)
			rc := rejectOn(c, -1, code.Code)
			require.NoError(t, m.close(t, 10*time.Second))
			_, rejected := rc.snapshot()
			require.NotZero(t, rejected, "the broker never refused: the test proves nothing")
			select {
			case <-logs.when("partitions taken by a rebalance before the final commit"):
			default:
				t.Fatalf("logs = %q; want the taken partitions logged", logs.msgs)
			}
		})
	}
}

// A partition the group takes from the member (lost: the member was
// evicted) while Close drains it has nothing left for Close to wait for:
// its records are no longer this member's, and their handlers see their
// ctx canceled. Close goes on at once, rather than waiting for the end of
// its ctx and returning the ctx's error.
func TestCloseDrainingAPartitionThatIsLostGoesOn(t *testing.T) {
	_, err := closeFencedWhileDraining(t)
	require.NoError(t, err, "Close waited for a partition the group had taken")
}

// closeFencedWhileDraining starts a member whose handler holds offset 0
// until its ctx ends, begins its Close, and, once Close drains (Run is
// over: nothing polls any more), makes the coordinator say the member is
// unknown: kgo reports the partition lost, and the handler sees its ctx
// canceled. It returns the member's consumer and Close's error.
func closeFencedWhileDraining(t *testing.T) (*seqkafka.Consumer, error) {
	t.Helper()
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "0")})
	g := newGate()
	logs := newLogSink()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		return g.wait(ctx, r.Offset) // held until its ctx ends
	}, seqkafka.WithCommitInterval(time.Hour), seqkafka.WithLogger(logs.logger()))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered // offset 0 in flight

	closed := make(chan error, 1)
	go func() { closed <- m.close(t, 10*time.Second) }()
	<-logs.when("draining revoked partitions") // Close waits for offset 0
	<-fence(c, cons)
	return cons, <-closed
}

// Close leaves no goroutine of its client waiting on kgo's rebalance gate
// (BlockRebalanceOnPoll). kgo's Client.Close starts a goroutine that
// leaves the group through that gate, and returns without waiting for it
// once the group is left already (Close leaves it first, within the commit
// timeout); Client.Close's own last poll, PollFetches(nil), holds the gate
// when it drains something, such as the notice of a fence that no Run
// polled. A leave goroutine that reaches the gate after that poll (one
// scheduled late, as on a loaded machine) then waited for ever: goleak saw
// one at the end of a package run. The test fences the member while Close
// drains, so that the notice is there for that last poll, then plays the
// late goroutine with a leave of its own (its ctx done, so that only the
// goroutine is left to run) and wants it to end.
func TestCloseLeavesNoLeaveWaitingForAPollRelease(t *testing.T) {
	cons, err := closeFencedWhileDraining(t)
	require.NoError(t, err)

	done, cancel := context.WithCancel(context.Background())
	cancel()
	_ = cons.Client().LeaveGroupContext(done) // nil or Canceled: the group is left, and done is done
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = goroutinesIn("kgo.(*Client).LeaveGroupContext"); len(left) == 0 {
			return
		}
	}
	t.Fatalf("a leave that reached the rebalance gate after Close still waits:\n%s", strings.Join(left, "\n\n"))
}

// goroutinesIn returns the stacks of the goroutines with fn in their stack.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			out = append(out, g)
		}
	}
	return out
}

// Close gives up when its ctx ends, also while a revocation drains: its
// running handlers see their ctx canceled then, not only once the
// revocation's drain timeout has passed, and Close returns the ctx's
// error.
func TestCloseGivesUpAtItsCtxWhileARevocationDrains(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "0")})
	g := newGate()
	logs := newLogSink()
	canceled := make(chan struct{})
	a, err := seqkafka.NewConsumer(groupOpts(c, kgo.Balancers(kgo.RangeBalancer())),
		func(ctx context.Context, r *kgo.Record) error {
			err := g.wait(ctx, r.Offset)
			if err != nil {
				close(canceled)
			}
			return err
		}, seqkafka.WithLogger(logs.logger()), seqkafka.WithCommitInterval(time.Hour),
		seqkafka.WithDrainTimeout(time.Hour))
	require.NoError(t, err)
	ma := startMember(t, a)
	<-g.entered // offset 0 in flight on a

	// b joins: with the eager range balancer a must revoke its partition,
	// and its revocation waits for offset 0.
	b, err := seqkafka.NewConsumer(groupOpts(c, kgo.Balancers(kgo.RangeBalancer())),
		func(context.Context, *kgo.Record) error { return nil }, seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	startMember(t, b)
	<-logs.when("draining revoked partitions")

	closed := make(chan error, 1)
	go func() { closed <- ma.close(t, 100*time.Millisecond) }()
	select {
	case err := <-closed:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second): // the drain timeout is an hour
		close(g.open) // let the revocation end, so that the test can
		t.Fatalf("Close outlasted its 100ms ctx by 30s: it waited for the revocation's drain")
	}
	select {
	case <-canceled:
	default:
		t.Fatal("the running handler's ctx was not canceled")
	}
}

// A revocation that meets a partition Close is draining waits for that
// drain, as for its own: the group hands the partition on only once this
// member is done with its records, so a key's record never runs on the
// next owner while it still runs here.
func TestRevocationDuringCloseWaitsForItsDrain(t *testing.T) {
	c := cluster(t, 2)
	produce(t, c, []*kgo.Record{rec(0, "a", "0"), rec(0, "a", "1"), rec(1, "b", "0"), rec(1, "b", "1")})
	g := newGate()
	logs := newLogSink()
	// The group waits for a's rejoin as long as the test may take: given
	// up on, a would be left out and b given both partitions at once.
	opts := groupOpts(c, kgo.Balancers(kgo.RangeBalancer()), kgo.RebalanceTimeout(time.Minute))
	a, err := seqkafka.NewConsumer(opts,
		func(ctx context.Context, r *kgo.Record) error {
			if r.Offset == 0 {
				return g.wait(ctx, r.Offset)
			}
			return nil
		}, seqkafka.WithLogger(logs.logger()), seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	ma := startMember(t, a)
	<-g.entered
	<-g.entered // offset 0 of both partitions in flight on a

	closed := make(chan error, 1)
	go func() { closed <- ma.close(t, 20*time.Second) }()
	<-logs.when("draining revoked partitions") // Close drains both

	// b joins: with the eager range balancer a revokes both partitions,
	// and b is given one of them.
	early := make(chan string, 4)
	b, err := seqkafka.NewConsumer(opts,
		func(ctx context.Context, r *kgo.Record) error {
			select {
			case <-g.open:
			default:
				early <- fmt.Sprintf("partition %d offset %d", r.Partition, r.Offset)
			}
			return nil
		}, seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	startMember(t, b)
	select {
	case <-logs.when("waiting for a revocation in progress of the same partitions"):
	case r := <-early:
		close(g.open)
		t.Fatalf("b ran %s while a still ran offset 0 of it", r)
	}
	close(g.open)
	require.NoError(t, <-closed)
	select {
	case r := <-early:
		t.Fatalf("b ran %s while a still ran offset 0 of it", r)
	default:
	}
}
