// TestMain and the helpers the test files share: newScheduler, one gate,
// one recorder, one backlog, one slog handler double (funcHandler), one
// error handler double (failures), within and seedBytes. The tests are
// filed by the guarantee they check, one file each; a helper that one file
// uses lives in that file.

package seqsched_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Schedulers log to slog.Default() unless told otherwise; the tests
	// that check what reaches it set it themselves.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	goleak.VerifyTestMain(movesChecked{m})
}

// movesChecked fails the run if any session, in any test (the model test's
// plans included), was sent an event for which the state machine's table
// (session.go's edges) has no edge from its state.
type movesChecked struct{ *testing.M }

func (m movesChecked) Run() int {
	code := m.M.Run()
	if n := seqsched.BadMoves(); n > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d session events off the state machine's table (session.go)\n", n)
		code = 1
	}
	return code
}

// newScheduler returns a scheduler that is shut down, and waited for, when
// the test ends.
func newScheduler[K comparable](t testing.TB, opts ...seqsched.Option) *seqsched.Scheduler[K] {
	t.Helper()
	s, err := seqsched.New[K](opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Shutdown(context.Background()))
	})
	return s
}

// recorder collects events from tasks in the order they happen.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// handler returns a funcHandler that adds each record to r as
// "LEVEL message" and then formats the record's attrs, as a real handler
// does: methods of user values (an error's Error, a panic value's String)
// run there.
func (r *recorder) handler() *funcHandler {
	return &funcHandler{handle: func(_ context.Context, rec slog.Record) error {
		r.add("%s %s", rec.Level, rec.Message)
		rec.Attrs(func(a slog.Attr) bool { _ = a.Value.String(); return true })
		return nil
	}}
}

// logger returns a logger whose records r collects (see handler).
func (r *recorder) logger() *slog.Logger { return slog.New(r.handler()) }

// gate submits a task on key that blocks until the returned release is
// called, and waits until it is running, so that later submissions to key
// queue up behind it.
func gate[K comparable](t testing.TB, s *seqsched.Scheduler[K], key K, opts ...seqsched.TaskOption) (release func(), f *seqsched.Future[struct{}]) {
	t.Helper()
	started := make(chan struct{})
	open := make(chan struct{})
	f, err := s.Go(context.Background(), key, func(context.Context) error {
		close(started)
		<-open
		return nil
	}, opts...)
	require.NoError(t, err)
	<-started
	var once sync.Once
	return func() { once.Do(func() { close(open) }) }, f
}

// record submits a task on key that appends name to r.
func record[K comparable](t testing.TB, s *seqsched.Scheduler[K], r *recorder, key K, name string, opts ...seqsched.TaskOption) *seqsched.Future[struct{}] {
	t.Helper()
	f, err := s.Go(context.Background(), key, func(context.Context) error {
		r.add("%s", name)
		return nil
	}, opts...)
	require.NoError(t, err)
	return f
}

// backlogLen is how many tasks a backlog queues: more than a worker that
// took a run of its session's Normal tasks in one go would take at once.
const backlogLen = 20

// backlog is a session's worker busy with one of backlogLen Normal tasks,
// t1..t20, queued behind a gate: t1..t(at-1) ran, t(at) runs and blocks
// until release, the rest wait. A task starts when its session's goroutine
// runs it, not when it is admitted or taken: until then Pause holds it,
// Replace replaces it, Discard cuts it, a High task goes ahead of it and
// Queued counts it. The tests that use backlog check each of these for the
// tasks after t(at), which a worker that took a run of tasks in one lock
// section (issue 47) holds by the time t(at) runs.
type backlog struct {
	r       recorder
	fs      []*seqsched.Future[struct{}] // fs[i] is t(i+1)'s
	at      int                          // the task that runs and blocks
	release func()                       // lets t(at) return
}

// backlogGates are the tasks a backlog can block at: t2, in its worker's
// first turn, and t12, in its second, after the turn's yield (with the
// default options, a turn is DefaultYieldAfter tasks, the gate's first),
// which a run outlives.
var backlogGates = []int{2, seqsched.DefaultYieldAfter + 2}

// forBacklogGatesByKeyAndHandle runs test as a subtest for each of
// backlogGates, with the call under test made by key and through a handle.
func forBacklogGatesByKeyAndHandle(t *testing.T, test func(t *testing.T, at int, by string)) {
	for _, at := range backlogGates {
		for _, by := range []string{"key", "handle"} {
			t.Run(fmt.Sprintf("t%d/%s", at, by), func(t *testing.T) { test(t, at, by) })
		}
	}
}

// queueBacklog queues the backlog on key behind a gate, opens the gate and
// returns once t2 runs (queueBacklogAt with at 2).
func queueBacklog(t testing.TB, s *seqsched.Scheduler[string], key string,
	body func(ctx context.Context, i int) error, opts func(i int) []seqsched.TaskOption) *backlog {
	t.Helper()
	return queueBacklogAt(t, s, key, 2, body, opts)
}

// queueBacklogAt queues the backlog on key behind a gate, opens the gate
// and returns once t(at) runs. Task ti records "ti", then returns body(ctx,
// i) (nil if body is nil; t(at) calls body once released). Each ti is
// submitted with opts(i) if opts is not nil. t(at) also returns, with its
// ctx's error, if its ctx ends.
func queueBacklogAt(t testing.TB, s *seqsched.Scheduler[string], key string, at int,
	body func(ctx context.Context, i int) error, opts func(i int) []seqsched.TaskOption) *backlog {
	t.Helper()
	b := &backlog{at: at}
	hold, g := gate(t, s, key)
	started, open := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.release = func() { once.Do(func() { close(open) }) }
	t.Cleanup(b.release) // before Shutdown's cleanup, should a test fail with t2 blocked
	for i := 1; i <= backlogLen; i++ {
		var o []seqsched.TaskOption
		if opts != nil {
			o = opts(i)
		}
		f, err := s.Go(context.Background(), key, func(ctx context.Context) error {
			b.r.add("t%d", i)
			if i == at {
				close(started)
				select {
				case <-open:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if body == nil {
				return nil
			}
			return body(ctx, i)
		}, o...)
		require.NoError(t, err)
		b.fs = append(b.fs, f)
	}
	hold()
	awaitAll(t, g)
	<-started
	return b
}

// names returns "ti" for i in from..to.
func names(from, to int) []string {
	var ns []string
	for i := from; i <= to; i++ {
		ns = append(ns, fmt.Sprint("t", i))
	}
	return ns
}

// awaitAll waits for every future and fails on the first error.
func awaitAll[T any](t testing.TB, fs ...*seqsched.Future[T]) {
	t.Helper()
	for i, f := range fs {
		_, err := f.Await(context.Background())
		require.NoError(t, err, "future %d", i)
	}
}

// funcHandler is the tests' one slog.Handler double: handle (if set) is
// called for every record, on the goroutine that logs it.
type funcHandler struct {
	handle func(context.Context, slog.Record) error
}

func (h *funcHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *funcHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.handle == nil {
		return nil
	}
	return h.handle(ctx, r)
}

func (h *funcHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *funcHandler) WithGroup(string) slog.Handler { return h }

// failures collects what WithErrorHandler is given.
type failures struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (f *failures) handle(_ context.Context, key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.errs == nil {
		f.errs = map[string][]error{}
	}
	f.errs[key] = append(f.errs[key], err)
}

func (f *failures) get(key string) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs[key]...)
}

// within fails the test if f does not return within d: a guard against a
// hang, never a synchronisation.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// seedBytes turns a seed into the bytes a generator reads (the model test's
// and the keys fuzzer's): the same seed, the same bytes.
func seedBytes(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eb5c4ed))
	b := make([]byte, 64+r.IntN(448))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
