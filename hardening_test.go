package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// What an adversarial probe found (RELIABILITY.md, "Hardening"): each test
// here failed, hung or crashed the process before its fix. Tests whose
// failure was a crash run their body in a child process, so that one crash
// does not hide the other results.

// inChild runs body in a child process of the test binary and fails t with
// the child's output if the child fails or dies. In the child, it runs body.
func inChild(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if os.Getenv("SEQSCHED_TEST_CHILD") == t.Name() {
		body(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SEQSCHED_TEST_CHILD="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process failed (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child process did not run %s:\n%s", t.Name(), out)
	}
}

// Item 1: a task that touched its ctx's Done submits follow-ups with that
// ctx and returns. The follow-ups' ctxs must keep the context contract; a
// follow-up given fn's ctx itself is not canceled by that task's end.
func TestFollowUpWithFinishedTasksCtxRunsAndKeepsContract(t *testing.T) {
	inChild(t, func(t *testing.T) {
		s := newScheduler[string](t)
		parent, cancel := context.WithTimeout(context.WithValue(context.Background(), ctxProbeKey{}, "probe"), time.Hour)
		defer cancel()
		releaseB, gB := gate(t, s, "B")
		follow := func(ctx context.Context) error {
			if v := ctxViolations(ctx, "probe"); v != nil {
				return errors.New(strings.Join(v, "; "))
			}
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			if err := child.Err(); err != nil {
				return err
			}
			return ctx.Err()
		}
		var fs []*seqsched.Future[struct{}]
		a, err := s.Go(parent, "A", func(tctx context.Context) error {
			select { // touch Done, as a select, an Await or a WithTimeout does
			case <-tctx.Done():
			default:
			}
			for _, key := range []string{"A", "B"} { // its own session, and a gated one
				f, err := s.Go(tctx, key, follow)
				if err != nil {
					return err
				}
				fs = append(fs, f)
			}
			return nil
		})
		require.NoError(t, err)
		awaitAll(t, a)
		releaseB()
		awaitAll(t, gB)
		awaitAll(t, fs...)
	})
}

// Item 1, the crash: a follow-up submitted with a ctx derived from a
// task's ctx watches its Done while that task returns.
func TestFollowUpWatchingDerivedCtxOfReturningTask(t *testing.T) {
	inChild(t, func(t *testing.T) {
		s := newScheduler[string](t)
		parent, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var f *seqsched.Future[struct{}]
		a, err := s.Go(parent, "A", func(tctx context.Context) error {
			derived := context.WithValue(tctx, ctxProbeKey{}, "derived")
			watching := make(chan struct{})
			var err error
			f, err = s.Go(derived, "B", func(ctx context.Context) error {
				done := ctx.Done()
				close(watching)
				<-done // the task that submitted it returns meanwhile
				if v := ctxViolations(ctx, "derived"); v != nil {
					return errors.New(strings.Join(v, "; "))
				}
				return ctx.Err()
			})
			if err != nil {
				return err
			}
			<-watching
			return nil
		})
		require.NoError(t, err)
		awaitAll(t, a)
		_, err = f.Await(context.Background())
		require.ErrorIs(t, err, context.Canceled, "a ctx derived from a task's ctx ends with the task")
	})
}

// The ctx contract on a task's ctx in every state: running, finished,
// canceled by its submitter, and through a forced Shutdown, each checked
// from several goroutines while the state changes.
func TestTaskCtxKeepsContractInEveryState(t *testing.T) {
	inChild(t, func(t *testing.T) {
		for _, cancelable := range []bool{false, true} {
			for round := range 50 {
				s, err := seqsched.New[int](seqsched.WithMaxConcurrency(1 + round%2))
				require.NoError(t, err)
				base := context.WithValue(context.Background(), ctxProbeKey{}, "probe")
				var cancels []context.CancelFunc
				var checkers []*ctxChecker
				ctxs := make(chan context.Context, 3)
				var fs []*seqsched.Future[struct{}]
				for key := range 3 {
					ctx := base
					if cancelable {
						var cancel context.CancelFunc
						ctx, cancel = context.WithCancel(base)
						cancels = append(cancels, cancel)
					}
					f, err := s.Go(ctx, key, func(tctx context.Context) error {
						ctxs <- tctx
						<-tctx.Done()
						return nil
					})
					require.NoError(t, err)
					fs = append(fs, f)
				}
				// Key 0 runs first; the others wait for a slot or run too.
				first := <-ctxs
				checkers = append(checkers, checkCtxConcurrently(first, "probe", 2))
				if cancelable && round%3 == 0 {
					cancels[0]() // canceled by its submitter
					_, _ = fs[0].Await(context.Background())
				}
				fctx, fcancel := context.WithCancel(context.Background())
				fcancel()
				_ = s.Shutdown(fctx) // forced: running ctxs are canceled, the rest dropped
				require.NoError(t, s.Shutdown(context.Background()))
				close(ctxs)
				for c := range ctxs {
					checkers = append(checkers, checkCtxConcurrently(c, "probe", 1))
				}
				for _, f := range fs {
					_, _ = f.Await(context.Background())
				}
				// Finished: every ctx stays done, with a stable error.
				for _, c := range checkers {
					require.Empty(t, c.finish())
				}
				require.Error(t, first.Err(), "a finished task's ctx is done")
				require.Empty(t, ctxViolations(first, "probe"))
				for _, cancel := range cancels {
					cancel()
				}
			}
		}
	})
}

// Item 2: during a forced Shutdown a task's ctx reported Err before its
// Done was closed.
func TestForcedShutdownClosesDoneBeforeErr(t *testing.T) {
	inChild(t, func(t *testing.T) {
		for round := range 300 {
			s, err := seqsched.New[int]()
			require.NoError(t, err)
			parent, cancel := context.WithCancel(context.Background())
			var bad atomic.Int32
			started := make(chan struct{})
			f, err := s.Go(parent, 1, func(ctx context.Context) error {
				if round%2 == 0 {
					_ = ctx.Done() // half the rounds ask for Done before the give-up
				}
				close(started)
				for {
					if ctx.Err() != nil {
						if !isClosed(ctx.Done()) {
							bad.Add(1)
						}
						return nil
					}
				}
			})
			require.NoError(t, err)
			<-started
			fctx, fcancel := context.WithCancel(context.Background())
			fcancel()
			require.ErrorIs(t, s.Shutdown(fctx), context.Canceled)
			awaitAll(t, f)
			require.NoError(t, s.Shutdown(context.Background()))
			cancel()
			require.Zero(t, bad.Load(), "Err() was non-nil while Done() was open")
		}
	})
}

// noPanic runs f and fails t if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// Items 3 and 4: a key a map cannot hold is refused with ErrInvalidKey.
func TestKeysAMapCannotHoldAreRefused(t *testing.T) {
	type withNaN struct{ F float64 }
	type withSlice struct{ S any }
	nop := func(context.Context) error { return nil }
	t.Run("float", func(t *testing.T) {
		s := newScheduler[float64](t)
		for range 3 {
			_, err := s.Go(context.Background(), math.NaN(), nop)
			require.ErrorIs(t, err, seqsched.ErrInvalidKey)
			var ke *seqsched.KeyError
			require.ErrorAs(t, err, &ke)
			require.Contains(t, err.Error(), "NaN")
		}
		require.ErrorIs(t, s.Remove(context.Background(), math.NaN()), seqsched.ErrInvalidKey)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Zero(t, s.Stats().Sessions, "a refused key makes no session")
		require.Zero(t, s.Stats().Submitted)
	})
	t.Run("interface", func(t *testing.T) {
		s := newScheduler[any](t)
		bad := []any{math.NaN(), float32(math.NaN()), complex(math.NaN(), 0), withNaN{math.NaN()},
			[2]any{1, math.NaN()}, []int{1}, map[string]int{}, func() {}, withSlice{[]int{1}}, [1]any{[]byte("x")}}
		for _, key := range bad {
			noPanic(t, "Go", func() {
				_, err := s.Go(context.Background(), key, nop)
				require.ErrorIs(t, err, seqsched.ErrInvalidKey, "key %#v", key)
			})
			noPanic(t, "Submit", func() {
				_, err := seqsched.Submit(context.Background(), s, key, func(context.Context) (int, error) { return 0, nil })
				require.ErrorIs(t, err, seqsched.ErrInvalidKey, "key %#v", key)
			})
			noPanic(t, "Remove", func() {
				require.ErrorIs(t, s.Remove(context.Background(), key), seqsched.ErrInvalidKey, "key %#v", key)
			})
		}
		require.Zero(t, s.Stats().Submitted)
	})
}

// ±0 are one key, as in a map, also inside a struct; every other comparable
// key is served.
func TestPlusAndMinusZeroAreOneSession(t *testing.T) {
	s := newScheduler[any](t)
	var r recorder
	negZero := math.Copysign(0, -1)
	release1, g1 := gate(t, s, any(0.0))
	release2, g2 := gate(t, s, any(struct{ F float64 }{0}))
	a := record(t, s, &r, any(negZero), "-0")
	b := record(t, s, &r, any(struct{ F float64 }{negZero}), "struct -0")
	st := s.Stats()
	require.Equal(t, 2, st.Sessions, "-0 and +0 share a session, as a map would")
	require.Equal(t, 2, st.Queued, "each waits behind its +0 gate")
	release1()
	release2()
	awaitAll(t, g1, g2, a, b)
	require.ElementsMatch(t, []string{"-0", "struct -0"}, r.get())
}

// Item 5: a graceful Shutdown returned nil while a worker that had just
// yielded its slot to a task back from an Await still ran (and logged).
// The token check in the package's tests (TokenViolations) also catches
// any release that leaves fewer tokens than running workers.
func TestShutdownReturnsAfterYieldingWorkers(t *testing.T) {
	before := seqsched.TokenViolations()
	rounds := 2000
	if testing.Short() {
		rounds = 300
	}
	for range rounds {
		var shutDown atomic.Bool
		var late atomic.Int32
		h := &funcHandler{handle: func(context.Context, slog.Record) error {
			if shutDown.Load() {
				late.Add(1)
			}
			return nil
		}}
		s, err := seqsched.New[int](seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10),
			seqsched.WithLogger(slog.New(h)))
		require.NoError(t, err)
		// A's task awaits L's first task; L has more than a turn of work,
		// so when L's turn ends A's task waits to take its slot back, and L
		// yields to it: the path that queued L before counting its token.
		var fs []*seqsched.Future[struct{}]
		a, err := s.Go(context.Background(), 0, func(ctx context.Context) error {
			var first *seqsched.Future[struct{}]
			for i := range 15 {
				f, err := s.Go(ctx, 1, func(context.Context) error { return nil })
				if err != nil {
					return err
				}
				if i == 0 {
					first = f
				}
			}
			_, err := first.Await(ctx)
			return err
		})
		require.NoError(t, err)
		for range 12 {
			f, err := s.Go(context.Background(), 2, func(context.Context) error { return nil })
			require.NoError(t, err)
			fs = append(fs, f)
		}
		awaitAll(t, a) // L's tasks are accepted; Shutdown races the workers
		require.NoError(t, s.Shutdown(context.Background()))
		shutDown.Store(true)
		awaitAll(t, fs...)
		require.Zero(t, late.Load(), "the scheduler logged after Shutdown returned nil")
	}
	require.Equal(t, before, seqsched.TokenViolations(), "a worker ran without a live token")
}

// funcHandler is a slog.Handler enabled at every level that calls handle.
type funcHandler struct {
	enabled func()
	handle  func(context.Context, slog.Record) error
}

func (h *funcHandler) Enabled(context.Context, slog.Level) bool {
	if h.enabled != nil {
		h.enabled()
	}
	return true
}
func (h *funcHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.handle == nil {
		return nil
	}
	return h.handle(ctx, r)
}
func (h *funcHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *funcHandler) WithGroup(string) slog.Handler      { return h }

// Item 6: Remove returned nil before the drained task's future resolved.
// A Remove with a done ctx returns nil only once the session is drained
// or idle, so spinning on it finds the moment the session retires.
func TestRemoveReturnsWithEveryAcceptedFutureResolved(t *testing.T) {
	rounds := 20000
	if testing.Short() {
		rounds = 3000
	}
	s := newScheduler[int](t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range rounds {
		f, err := s.Go(context.Background(), i, func(context.Context) error { return nil })
		require.NoError(t, err)
		for {
			err := s.Remove(done, i)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, context.Canceled)
		}
		require.True(t, isClosed(f.Done()), "round %d: Remove returned nil before the future resolved", i)
	}
}

// Item 7: a WithWeight function that calls runtime.Goexit (t.FailNow in a
// test) killed the worker: its task never resolved and, under
// WithMaxConcurrency, the slot leaked.
func TestWeightThatCallsGoexit(t *testing.T) {
	for _, limit := range []int{0, 1} {
		var calls atomic.Int32
		weight := func(key string) int {
			if key == "bad" && calls.Add(1)%2 == 1 {
				var ft fakeT
				ft.FailNow()
			}
			return 1
		}
		var logged atomic.Int32
		h := &funcHandler{handle: func(_ context.Context, r slog.Record) error {
			if strings.Contains(r.Message, "WithWeight") {
				logged.Add(1)
			}
			return nil
		}}
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(limit), seqsched.WithWeight(weight),
			seqsched.WithLogger(slog.New(h)))
		require.NoError(t, err)
		var r recorder
		var fs []*seqsched.Future[struct{}]
		for i := range 30 {
			key := []string{"bad", "good"}[i%2]
			fs = append(fs, record(t, s, &r, key, key))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // turns a hang into a report
		for i, f := range fs {
			_, err := f.Await(ctx)
			require.NoError(t, err, "limit %d, future %d", limit, i)
		}
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, s.Shutdown(sctx), "limit %d: a worker or slot was lost", limit)
		scancel()
		require.Len(t, r.get(), 30)
		require.Equal(t, int32(1), logged.Load(), "the Goexit is logged once")
	}
}

// The logger is user code on the workers: a handler that panics or calls
// runtime.Goexit in Enabled or Handle, on any record (a panic, a slow
// task, a yield, a bad weight), loses no task and no slot.
func TestLoggerThatPanicsOrGoexitsLosesNothing(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		for _, where := range []string{"enabled", "handle"} {
			for _, limit := range []int{0, 1} {
				fail := func() {
					if how == "panic" {
						panic("handler panicked")
					}
					runtime.Goexit()
				}
				h := &funcHandler{}
				if where == "enabled" {
					h.enabled = fail
				} else {
					h.handle = func(context.Context, slog.Record) error { fail(); return nil }
				}
				s := newScheduler[int](t, seqsched.WithMaxConcurrency(limit), seqsched.WithYieldAfter(10),
					seqsched.WithSlowTask(time.Nanosecond), seqsched.WithLogger(slog.New(h)),
					seqsched.WithWeight(func(key int) int { return 1000 * (key % 2) })) // 0 and 1000 are out of range
				var fs []*seqsched.Future[struct{}]
				var ran atomic.Int32
				for i := range 90 {
					f, err := s.Go(context.Background(), i%3, func(context.Context) error {
						ran.Add(1)
						if i%10 == 0 {
							panic("task panicked")
						}
						return nil // slower than WithSlowTask's 1ns: logged
					})
					require.NoError(t, err)
					fs = append(fs, f)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // turns a hang into a report
				for i, f := range fs {
					_, err := f.Await(ctx)
					if i%10 == 0 {
						var pe *seqsched.PanicError
						require.ErrorAs(t, err, &pe, "%s in %s, limit %d, future %d", how, where, limit, i)
					} else {
						require.NoError(t, err, "%s in %s, limit %d, future %d", how, where, limit, i)
					}
				}
				cancel()
				require.Equal(t, int32(90), ran.Load())
				require.NoError(t, s.Shutdown(context.Background()))
			}
		}
	}
}

// A handler may call back into the scheduler (Submit, Stats) and may block;
// a blocked handler holds up its worker only, and Shutdown gives up at its
// ctx's end like for a blocked task.
func TestLoggerThatCallsBackOrBlocks(t *testing.T) {
	var s *seqsched.Scheduler[int]
	var mu sync.Mutex
	var inner []*seqsched.Future[struct{}]
	unblock := make(chan struct{})
	blocked := make(chan struct{}, 1)
	h := &funcHandler{handle: func(_ context.Context, r slog.Record) error {
		_ = s.Stats()
		f, err := s.Go(context.Background(), 100, func(context.Context) error { return nil })
		if err == nil {
			mu.Lock()
			inner = append(inner, f)
			mu.Unlock()
		}
		if strings.Contains(r.Message, "panicked") {
			select {
			case blocked <- struct{}{}:
			default:
			}
			<-unblock
		}
		return nil
	}}
	var err error
	s, err = seqsched.New[int](seqsched.WithLogger(slog.New(h)))
	require.NoError(t, err)
	p, err := s.Go(context.Background(), 1, func(context.Context) error { panic("log me") })
	require.NoError(t, err)
	other, err := s.Go(context.Background(), 2, func(context.Context) error { return nil })
	require.NoError(t, err)
	<-blocked
	awaitAll(t, other) // another session is not held up by the blocked handler
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
	close(unblock)
	require.NoError(t, s.Shutdown(context.Background()))
	var pe *seqsched.PanicError
	_, err = p.Await(context.Background())
	require.ErrorAs(t, err, &pe)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, inner)
	for _, f := range inner {
		<-f.Done() // accepted before Shutdown: ran or was dropped, resolved either way
	}
}

// A task calling back into its own scheduler in ways that cannot finish
// gets an error, not a deadlock.
func TestTaskShutdownFromInsideGivesErrWouldDeadlock(t *testing.T) {
	s := newScheduler[int](t)
	f, err := s.Go(context.Background(), 1, func(ctx context.Context) error {
		return s.Shutdown(ctx)
	})
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrWouldDeadlock)
	_, err = s.Go(context.Background(), 2, func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrClosed, "the Shutdown began")
}

// A submit ctx is user code on the worker too: its Err may panic or
// Goexit when the worker checks it before starting the task.
type hostileCtx struct {
	context.Context
	how string
}

func (c hostileCtx) Err() error {
	if c.how == "panic" {
		panic("Err panicked")
	}
	runtime.Goexit()
	return nil
}

func TestSubmitCtxWhoseErrPanicsOrGoexits(t *testing.T) {
	for _, limit := range []int{0, 1} {
		s := newScheduler[int](t, seqsched.WithMaxConcurrency(limit))
		release, g := gate(t, s, 1) // the hostile tasks are checked by the worker, not at Submit
		p, err := s.Go(hostileCtx{context.Background(), "panic"}, 1, func(context.Context) error { return nil })
		require.NoError(t, err)
		x, err := s.Go(hostileCtx{context.Background(), "goexit"}, 1, func(context.Context) error { return nil })
		require.NoError(t, err)
		after, err := s.Go(context.Background(), 1, func(context.Context) error { return nil })
		require.NoError(t, err)
		release()
		awaitAll(t, g, after)
		var pe *seqsched.PanicError
		_, err = p.Await(context.Background())
		require.ErrorAs(t, err, &pe)
		_, err = x.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrGoexit)
		require.NoError(t, s.Shutdown(context.Background()))
	}
}
