package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Containment: every goroutine the scheduler starts has one guard at its
// top. A panic or runtime.Goexit in anything it calls (fn, the error
// handler, the log handler, the weight function, and methods of values
// they return) fails the task at hand or is logged; the session goes on,
// and nothing is lost: Shutdown returns nil and no goroutine is left.

// records is a log handler double that keeps every record's message and
// level, and can be told to misbehave on a message.
type records struct {
	mu   sync.Mutex
	got  []string
	bad  string // a message to misbehave on
	how  string // "panic" or "goexit"
	done bool   // misbehaved once already
}

func (r *records) logger() *slog.Logger {
	return slog.New(&funcHandler{handle: func(_ context.Context, rec slog.Record) error {
		r.mu.Lock()
		r.got = append(r.got, fmt.Sprintf("%s %s", rec.Level, rec.Message))
		misbehave := rec.Message == r.bad && !r.done
		r.done = r.done || misbehave
		how := r.how
		r.mu.Unlock()
		if misbehave {
			if how == "goexit" {
				runtime.Goexit()
			}
			panic("logger " + rec.Message)
		}
		// Format every attr, as a real handler does: methods of user
		// values (an error's Error, a panic value's String) run here.
		rec.Attrs(func(a slog.Attr) bool { _ = a.Value.String(); return true })
		return nil
	}})
}

func (r *records) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// shutdownClean shuts s down and checks that nothing is left running.
func shutdownClean(t *testing.T, s *seqsched.Scheduler[string]) {
	t.Helper()
	require.NoError(t, s.Shutdown(context.Background()))
	require.Zero(t, seqsched.Live(s), "every goroutine of the scheduler gave its token back")
	st := s.Stats()
	require.Equal(t, st.Submitted, st.Completed, "every accepted task resolved")
}

func TestFnPanicAndGoexitFailTheTaskAndTheSessionGoesOn(t *testing.T) {
	var logs records
	s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
	require.NoError(t, err)
	p, err := s.Go(context.Background(), "a", func(context.Context) error { panic("boom") })
	require.NoError(t, err)
	g, err := s.Go(context.Background(), "a", func(context.Context) error { runtime.Goexit(); return nil })
	require.NoError(t, err)
	after, err := seqsched.Submit(context.Background(), s, "a", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)

	_, err = p.Await(context.Background())
	var perr *seqsched.PanicError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "boom", perr.Value)
	require.Contains(t, string(perr.Stack), "containment_test.go", "the stack is the panicking goroutine's")
	_, err = g.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrGoexit)
	n, err := after.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 7, n)
	shutdownClean(t, s)
	require.Equal(t, []string{"ERROR seqsched: task panicked", "ERROR seqsched: task called runtime.Goexit"}, logs.messages())
	require.Equal(t, uint64(2), s.Stats().Panics)
}

func TestErrorHandlerPanicOrGoexitIsLoggedAndTheNextReportGoesOn(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs records
			var mu sync.Mutex
			var reported []string
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()),
				seqsched.WithErrorHandler(func(_ context.Context, key string, err error) {
					mu.Lock()
					reported = append(reported, err.Error())
					first := len(reported) == 1
					mu.Unlock()
					if first && how == "panic" {
						panic("handler")
					}
					if first {
						runtime.Goexit()
					}
				}))
			require.NoError(t, err)
			for i := range 3 {
				require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return fmt.Errorf("e%d", i) }))
			}
			require.NoError(t, s.Remove(context.Background(), "a"))
			mu.Lock()
			require.Equal(t, []string{"e0", "e1", "e2"}, reported, "each failure reported once, in order")
			mu.Unlock()
			shutdownClean(t, s)
			want := "ERROR seqsched: WithErrorHandler panicked"
			if how == "goexit" {
				want = "ERROR seqsched: WithErrorHandler called runtime.Goexit"
			}
			require.Equal(t, []string{want}, logs.messages())
		})
	}
}

func TestLogHandlerPanicOrGoexitDropsOnlyItsRecord(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			logs := records{bad: "seqsched: posted task failed", how: how}
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
			require.NoError(t, err)
			for i := range 3 {
				require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return fmt.Errorf("e%d", i) }))
			}
			f, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
			require.NoError(t, err)
			awaitAll(t, f)
			require.NoError(t, s.Remove(context.Background(), "a"))
			shutdownClean(t, s)
			require.Equal(t, []string{
				"ERROR seqsched: posted task failed", // the one the handler failed on, seen before it failed
				"ERROR seqsched: posted task failed",
				"ERROR seqsched: posted task failed",
			}, logs.messages())
		})
	}
}

func TestWeightPanicOrGoexitCountsAsOneAndIsLoggedOnce(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs records
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()), seqsched.WithWeight(func(string) int {
				if how == "panic" {
					panic("weight")
				}
				runtime.Goexit()
				return 1
			}))
			require.NoError(t, err)
			var ran recorder
			var fs []*seqsched.Future[struct{}]
			for i := range 25 {
				fs = append(fs, record(t, s, &ran, "a", fmt.Sprint(i)))
			}
			awaitAll(t, fs...)
			require.Len(t, ran.get(), 25)
			shutdownClean(t, s)
			msgs := logs.messages()
			require.NotEmpty(t, msgs)
			for _, m := range msgs {
				require.Contains(t, m, "ERROR seqsched: WithWeight")
			}
		})
	}
}

// panicky is a value whose methods panic or call runtime.Goexit: an error
// whose Error does, or a panic value whose String does. The scheduler calls
// no method of it itself; the log handler that formats it runs under the
// guard.
type panicky struct{ how string }

func (p panicky) misbehave() {
	if p.how == "goexit" {
		runtime.Goexit()
	}
	panic("method of a user value")
}
func (p panicky) Error() string          { p.misbehave(); return "" }
func (p panicky) String() string         { p.misbehave(); return "" }
func (p panicky) Is(error) bool          { p.misbehave(); return false }
func (p panicky) Unwrap() error          { p.misbehave(); return nil }
func (p panicky) As(any) bool            { p.misbehave(); return false }
func (p panicky) Format(fmt.State, rune) { p.misbehave() }

func TestMethodsOfUserValuesThatPanicOrGoexitLoseNothing(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs records
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
			require.NoError(t, err)
			v := panicky{how}
			// A posted fn's error whose methods misbehave, and a panic value
			// whose String does: the logger formats both.
			require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return v }))
			require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { panic(v) }))
			var ran recorder
			last := record(t, s, &ran, "a", "after")
			awaitAll(t, last)
			require.Equal(t, []string{"after"}, ran.get())
			require.NoError(t, s.Remove(context.Background(), "a"))
			shutdownClean(t, s)
			st := s.Stats()
			require.Equal(t, uint64(3), st.Completed)
			require.Equal(t, uint64(1), st.Panics)
		})
	}
}

func TestAPostedFnsOwnFailureIsLoggedAtErrorWhateverItWraps(t *testing.T) {
	var logs records
	s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
	require.NoError(t, err)
	for _, e := range []error{
		context.DeadlineExceeded,                    // a database call's timeout
		fmt.Errorf("db: %w", context.Canceled),      // wrapped
		fmt.Errorf("other: %w", seqsched.ErrClosed), // another scheduler's ErrClosed, wrapped
		fmt.Errorf("peer: %w", seqsched.ErrDiscarded),
	} {
		require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return e }))
	}
	require.NoError(t, s.Remove(context.Background(), "a"))
	shutdownClean(t, s)
	require.Equal(t, []string{
		"ERROR seqsched: posted task failed",
		"ERROR seqsched: posted task failed",
		"ERROR seqsched: posted task failed",
		"ERROR seqsched: posted task failed",
	}, logs.messages())
}

func TestAwaitOnANilOrZeroFutureIsAnError(t *testing.T) {
	var nilF *seqsched.Future[int]
	_, err := nilF.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	var zero seqsched.Future[int]
	_, err = zero.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	select {
	case <-zero.Done():
	default:
		t.Fatal("Done of a zero Future is not closed: a select on it would hang")
	}
}

func TestCloseGivesUpAtOnceAndShutdownThenWaits(t *testing.T) {
	s, err := seqsched.New[string]()
	require.NoError(t, err)
	started := make(chan struct{})
	running, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, err)
	<-started
	queued, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = queued.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrClosed, "a task not yet started resolves with ErrClosed")
	_, err = running.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled, "the running task's ctx is canceled")
	_, err = s.Go(context.Background(), "b", func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrClosed)
	require.NoError(t, s.Close(), "Close again")
	require.NoError(t, s.Shutdown(context.Background()), "Shutdown after Close waits for the goroutines")
	require.Zero(t, seqsched.Live(s))
	require.True(t, errors.Is(s.Remove(context.Background(), "a"), seqsched.ErrClosed), "Remove after a give-up says tasks may have been dropped")
}

// A key's failures are reported before a Remove of the key returns nil,
// whichever of its sessions (a closing one, or the successor behind it)
// they belonged to: a session is forgotten only once its reports are made.
func TestRemoveReturnsNilOnlyOnceTheKeysDroppedPostsAreReported(t *testing.T) {
	var mu sync.Mutex
	var reported []error
	s := newScheduler[string](t, seqsched.WithErrorHandler(func(_ context.Context, _ string, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	h1, err := s.Open("k")
	require.NoError(t, err)
	release, busy := gate(t, s, "k")
	require.NoError(t, h1.Post(context.Background(), func(context.Context) error { return nil })) // dropped below
	closing := make(chan error, 1)
	go func() { closing <- h1.Close(context.Background()) }()
	for { // the first session closes: a task through h1 is refused
		if err := h1.Post(context.Background(), func(context.Context) error { return nil }); err != nil {
			require.ErrorIs(t, err, seqsched.ErrSessionClosing)
			break
		}
		runtime.Gosched()
	}
	h2, err := s.Open("k") // a successor behind the closing session
	require.NoError(t, err)
	high, normal := s.Queued("k")
	require.Positive(t, high+normal, "Queued counts the tasks of the closing session the successor waits behind")
	discarded := make(chan error, 1)
	go func() { discarded <- h2.Discard(context.Background()) }()
	for { // Discard dropped the backlog of both sessions
		if _, n := s.Queued("k"); n == 0 {
			break
		}
		runtime.Gosched()
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "k") }()
	release()
	awaitAll(t, busy)
	require.NoError(t, <-removed)
	mu.Lock()
	n := len(reported)
	mu.Unlock()
	require.GreaterOrEqual(t, n, 1, "Remove returned nil before the dropped post was reported")
	for _, err := range reported {
		require.ErrorIs(t, err, seqsched.ErrDiscarded)
	}
	require.NoError(t, <-discarded)
	require.NoError(t, <-closing)
}

func TestQueuedCountsTheTasksASuccessorWaitsBehind(t *testing.T) {
	s := newScheduler[string](t)
	release, busy := gate(t, s, "k")
	for range 5 {
		_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "k") }()
	for { // Remove closed the session
		if _, err := s.Go(context.Background(), "k", func(context.Context) error { return nil }); err != nil {
			require.ErrorIs(t, err, seqsched.ErrSessionClosing)
			break
		}
		runtime.Gosched()
	}
	h, err := s.Open("k")
	require.NoError(t, err)
	_, normal := s.Queued("k")
	_, hn := h.Queued()
	require.GreaterOrEqual(t, normal, 5, "the key's queued tasks, the predecessor's included")
	require.Equal(t, normal, hn, "the handle on the successor says the same")
	release()
	awaitAll(t, busy)
	require.NoError(t, <-removed)
	require.NoError(t, h.Close(context.Background()))
}
