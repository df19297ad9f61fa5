package seqjetstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// Members as real processes: the test binary runs again as a member
// (TestBalanceMemberProcess), which the test kills with SIGKILL and
// freezes with SIGSTOP. A member's handler applies each message through
// the test process (a request on "apply", answered once the store took
// it), so the store sees every application in the order it happened; the
// store fences by the owner's epoch, as examples/jetstream's does, for a
// frozen owner may finish a handler after the next owner ran later
// messages of its key (see the package doc). Members report their
// partitions on "stats.<name>".

// memberEnv holds, in a member process, "<url> <name> <partitions>".
const memberEnv = "SEQJETSTREAM_BALANCE_MEMBER"

// TestBalanceMemberProcess is the body of a member process, not a test
// of its own: it skips unless memberEnv is set. It runs until its stdin
// closes (the test ended or died).
func TestBalanceMemberProcess(t *testing.T) {
	cfg := os.Getenv(memberEnv)
	if cfg == "" {
		t.Skip("the body of a member process of the process tests")
	}
	var url, name string
	var parts int
	_, err := fmt.Sscan(cfg, &url, &name, &parts)
	require.NoError(t, err)
	nc, err := nats.Connect(url, nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var cons []jetstream.Consumer
	for i := range parts {
		cn, err := js.Consumer(context.Background(), "S", fmt.Sprint("part-", i))
		require.NoError(t, err)
		cons = append(cons, cn)
	}
	c, err := seqjetstream.NewConsumer(cons, func(ctx context.Context, msg jetstream.Msg) error {
		r, err := nc.Request("apply", fmt.Appendf(nil, "%s %d %d", msg.Subject(), seqjetstream.Sequence(ctx), seqjetstream.Epoch(ctx)), 5*time.Second)
		if err == nil && len(r.Data) > 0 {
			err = errors.New(string(r.Data)) // fenced: not applied, so not acknowledged
		}
		return err
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond),
		seqjetstream.WithBalance(js, "owners"), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // the test's end: stdin closes
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	go func() { _ = c.Run(ctx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Close(cctx)
			stop()
			return
		case <-tick.C:
		}
		var b strings.Builder
		for _, cs := range c.Stats().Consumers {
			fmt.Fprintf(&b, "%d%d ", one(cs.Owned), one(cs.Assigned))
		}
		_ = nc.Publish("stats."+name, []byte(b.String()))
	}
}

func one(b bool) int {
	if b {
		return 1
	}
	return 0
}

// proc is a member process, and what it last reported.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	owned []bool
	asgn  []bool
}

// processes runs member processes against b's server and applies their
// messages to b.store, fenced by epoch.
type processes struct {
	b     *balanced
	mu    sync.Mutex
	procs map[string]*proc
	epoch map[string]uint64 // partition → the highest epoch written under
	fence int               // writes refused for a stale epoch
}

func newProcesses(b *balanced) *processes {
	ps := &processes{b: b, procs: make(map[string]*proc), epoch: make(map[string]uint64)}
	nc, _ := reconnecting(b.t, b.url)
	_, err := nc.Subscribe("apply", func(m *nats.Msg) {
		var subj string
		var seq, epoch uint64
		if _, err := fmt.Sscan(string(m.Data), &subj, &seq, &epoch); err != nil {
			b.t.Errorf("apply %q: %v", m.Data, err)
			return
		}
		part := strings.Split(subj, ".")[1]
		ps.mu.Lock()
		stale := epoch < ps.epoch[part]
		if stale {
			ps.fence++
		} else {
			ps.epoch[part] = epoch
		}
		ps.mu.Unlock()
		if stale {
			_ = m.Respond([]byte("a stale epoch: write refused"))
			return
		}
		b.store.apply(subj, seq)
		_ = m.Respond(nil)
	})
	require.NoError(b.t, err)
	_, err = nc.Subscribe("stats.*", func(m *nats.Msg) {
		ps.mu.Lock()
		p := ps.procs[strings.TrimPrefix(m.Subject, "stats.")]
		ps.mu.Unlock()
		if p == nil {
			return
		}
		var owned, asgn []bool
		for _, f := range strings.Fields(string(m.Data)) {
			owned, asgn = append(owned, f[0] == '1'), append(asgn, f[1] == '1')
		}
		p.mu.Lock()
		p.owned, p.asgn = owned, asgn
		p.mu.Unlock()
	})
	require.NoError(b.t, err)
	require.NoError(b.t, nc.Flush())
	return ps
}

func (ps *processes) start(name string) *proc {
	t := ps.b.t
	cmd := exec.Command(os.Args[0], "-test.run=^TestBalanceMemberProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", memberEnv, ps.b.url, name, ps.b.parts))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	go func() { // the member's test output, for a failure
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, "FAIL") || strings.Contains(l, "Error") {
				t.Logf("%s: %s", name, l)
			}
		}
	}()
	p := &proc{name: name, cmd: cmd, stdin: stdin}
	ps.mu.Lock()
	ps.procs[name] = p
	ps.mu.Unlock()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.stdin.Close()
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// check logs what the run cost, and checks that every message published
// was applied and none after a later one of its key.
func (ps *processes) check() {
	b, t := ps.b, ps.b.t
	t.Helper()
	s := b.store.snapshot()
	ps.mu.Lock()
	fenced := ps.fence
	ps.mu.Unlock()
	published := int(b.seq.Load())
	t.Logf("published %d, lost %d, applied twice %d, order gaps %d, stale writes fenced %d", published, published-s.applied, s.dups, s.gaps, fenced)
	assert.Zero(t, s.gaps, "messages applied after a later one of their key")
	eventually(t, func() bool { return b.store.count() == published }, "every message applied (%d of %d)",
		lazy(func() any { return b.store.count() }), published)
}

// state is what p last reported: partitions owned, and assigned to it.
func (p *proc) state() (owned, assigned []bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned, p.asgn
}

// layout returns, per partition, the live member it is assigned to ("" if
// none, "*" if more than one), and the partitions each owns.
func layout(parts int, live ...*proc) ([]string, []int) {
	out := make([]string, parts)
	counts := make([]int, len(live))
	for j, p := range live {
		owned, asgn := p.state()
		for i := range min(parts, len(asgn)) {
			if asgn[i] {
				if out[i] != "" {
					out[i] = "*"
				} else {
					out[i] = p.name
				}
			}
			if owned[i] {
				counts[j]++
			}
		}
	}
	return out, counts
}

// settle publishes rounds (a partition is pinned at a delivery) until the
// live members own want partitions each, each partition assigned to one
// of them, then waits for every message published to be applied; it
// returns how long that took.
func (ps *processes) settle(want []int, live ...*proc) time.Duration {
	b, t := ps.b, ps.b.t
	t.Helper()
	begin := time.Now()
	deadline := begin.Add(45 * time.Second)
	for r := 0; ; r++ {
		a, got := layout(b.parts, live...)
		if fmt.Sprint(got) == fmt.Sprint(want) && !contains(a, "*") && !contains(a, "") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions owned %v; want %v; assigned %v; applied %d of %d", got, want, a, b.store.count(), b.seq.Load())
		}
		b.round(fmt.Sprint("k", r%3))
		time.Sleep(100 * time.Millisecond) // a publishing rhythm, not a synchronisation
	}
	for b.store.count() != int(b.seq.Load()) {
		if time.Now().After(deadline) {
			a, got := layout(b.parts, live...)
			t.Fatalf("applied %d of %d; partitions owned %v, assigned %v", b.store.count(), b.seq.Load(), got, a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(begin)
}

// The rest of the probe's scenarios with member processes: a graceful
// leave, a server restart (stream and bucket on file) and a deleted
// bucket, each of the last two followed by a SIGKILL, and a join between
// them. Only the leaver's or the dead member's partitions move, the
// joiner takes its share, and nothing is lost or applied out of order.
func TestBalanceProcessesLeaveAndSurviveAServerRestartAndALostBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("member processes: about 40 s")
	}
	srv := startRestartable(t)
	b := newBalancedWith(t, 6, balancedOpts{url: srv.url, storage: jetstream.FileStorage})
	ps := newProcesses(b)
	m1, m2, m3 := ps.start("m1"), ps.start("m2"), ps.start("m3")
	ps.settle([]int{2, 2, 2}, m1, m2, m3)
	before, _ := layout(b.parts, m1, m2, m3)

	require.NoError(t, m3.stdin.Close()) // Close: it leaves the membership
	took := ps.settle([]int{3, 3}, m1, m2)
	after, _ := layout(b.parts, m1, m2)
	t.Logf("leave 3→2: rebalanced in %v, %d partitions moved", took.Round(time.Millisecond), movedBetween(before, after))
	onlyTheDeads(t, before, after, "m3")

	before = after
	srv.restart()
	require.NoError(t, m2.cmd.Process.Signal(syscall.SIGKILL))
	took = ps.settle([]int{6}, m1)
	after, _ = layout(b.parts, m1)
	t.Logf("server restarted, then SIGKILL 2→1: rebalanced in %v, %d partitions moved", took.Round(time.Millisecond), movedBetween(before, after))
	onlyTheDeads(t, before, after, "m2")

	before = after
	m4 := ps.start("m4")
	took = ps.settle([]int{3, 3}, m1, m4)
	after, _ = layout(b.parts, m1, m4)
	t.Logf("join 1→2: rebalanced in %v, %d partitions moved", took.Round(time.Millisecond), movedBetween(before, after))
	assert.Equal(t, 3, movedBetween(before, after), "partitions moved by a join: %v → %v", before, after)

	before = after
	require.NoError(t, b.js.DeleteKeyValue(context.Background(), "owners"))
	require.NoError(t, m1.cmd.Process.Signal(syscall.SIGKILL))
	took = ps.settle([]int{6}, m4)
	after, _ = layout(b.parts, m4)
	t.Logf("bucket deleted, then SIGKILL 2→1: rebalanced in %v, %d partitions moved", took.Round(time.Millisecond), movedBetween(before, after))
	onlyTheDeads(t, before, after, "m1")

	ps.check()
}

func TestBalanceProcessesKilledAndFrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("member processes: about 30 s")
	}
	b := newBalanced(t, 6)
	ps := newProcesses(b)
	m1, m2, m3 := ps.start("m1"), ps.start("m2"), ps.start("m3")
	ps.settle([]int{2, 2, 2}, m1, m2, m3)
	before, _ := layout(b.parts, m1, m2, m3)

	watch := ps.watchHandover(before, "m2", m1, m3)
	require.NoError(t, m2.cmd.Process.Signal(syscall.SIGKILL))
	took := ps.settle([]int{3, 3}, m1, m3)
	after, _ := layout(b.parts, m1, m3)
	t.Logf("SIGKILL 3→2: rebalanced in %v, %d partitions moved; %s", took.Round(time.Millisecond), movedBetween(before, after), watch())
	onlyTheDeads(t, before, after, "m2")

	// Frozen past the TTL and the PinnedTTL: the other takes all; thawed,
	// it joins again and takes its share back.
	before = after
	require.NoError(t, m3.cmd.Process.Signal(syscall.SIGSTOP))
	took = ps.settle([]int{6}, m1)
	after, _ = layout(b.parts, m1)
	t.Logf("SIGSTOP 2→1: rebalanced in %v, %d partitions moved", took.Round(time.Millisecond), movedBetween(before, after))
	onlyTheDeads(t, before, after, "m3")
	require.NoError(t, m3.cmd.Process.Signal(syscall.SIGCONT))
	took = ps.settle([]int{3, 3}, m1, m3)
	t.Logf("SIGCONT 1→2: rebalanced in %v", took.Round(time.Millisecond))

	ps.check()
}

// watchHandover follows, from now (just before the dead member is killed)
// until the returned func is called, where the time of a hand-over of the
// dead member's partitions (layout before) goes: when the membership
// assigned all of them to live members (the bucket's TTL and a
// heartbeat), when the server pinned each to another client (PinnedTTL
// after the dead member's last pull), and when live members owned them
// all (a delivery under the new pin). The func reports the three times.
func (ps *processes) watchHandover(before []string, dead string, live ...*proc) func() string {
	b, t := ps.b, ps.b.t
	var parts []int
	for i, m := range before {
		if m == dead {
			parts = append(parts, i)
		}
	}
	pinOf := func(i int) string {
		cn, err := b.js.Consumer(context.Background(), "S", fmt.Sprint("part-", i))
		if err != nil {
			return ""
		}
		info, err := cn.Info(context.Background())
		if err != nil || len(info.PriorityGroups) == 0 {
			return ""
		}
		return info.PriorityGroups[0].PinnedClientID
	}
	pins := make(map[int]string)
	for _, i := range parts {
		pins[i] = pinOf(i)
	}
	begin := time.Now()
	var assigned, pinned, owned time.Duration
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for assigned == 0 || pinned == 0 || owned == 0 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			a, _ := layout(b.parts, live...)
			moved, pinnedAnew, taken := true, true, true
			for _, i := range parts {
				moved = moved && a[i] != "" && a[i] != "*" && a[i] != dead
				if pinned == 0 {
					now := pinOf(i)
					pinnedAnew = pinnedAnew && now != "" && now != pins[i]
				}
				own := false
				for _, p := range live {
					o, _ := p.state()
					own = own || (i < len(o) && o[i])
				}
				taken = taken && own
			}
			since := time.Since(begin)
			if assigned == 0 && moved {
				assigned = since
			}
			if pinned == 0 && pinnedAnew {
				pinned = since
			}
			if owned == 0 && taken {
				owned = since
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	})
	return func() string {
		close(stop)
		<-stopped
		return fmt.Sprintf("after the kill: assigned to live members at %v (bucket TTL and a heartbeat), pinned to them by the server at %v (PinnedTTL), owned at %v",
			assigned.Round(time.Millisecond), pinned.Round(time.Millisecond), owned.Round(time.Millisecond))
	}
}
