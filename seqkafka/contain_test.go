package seqkafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqkafka"
)

// injection is what a user function does at its first call in
// TestEveryCallSiteSurvivesItsUserCode: return an error (or, for
// functions without one, return normally), panic, call runtime.Goexit,
// block until its ctx ends (or, for the logger, until the test ends), or
// call back into the consumer (Close with its own ctx, Pause, Resume,
// Stats) and then fail.
type injection int

const (
	injectError injection = iota
	injectPanic
	injectGoexit
	injectBlock
	injectCallBack
)

func (i injection) String() string {
	return [...]string{"error", "panic", "goexit", "block", "callback"}[i]
}

// injector performs an injection once, at the first call that asks.
type injector struct {
	what     injection
	cons     atomic.Pointer[seqkafka.Consumer]
	once     atomic.Bool
	release  chan struct{} // ends a block whose ctx never ends (the logger's)
	closeErr chan error    // what Close returned when called back
}

func newInjector(what injection) *injector {
	return &injector{what: what, release: make(chan struct{}), closeErr: make(chan error, 1)}
}

// do returns (err, true) when it injected; false when the call is not the
// first and should behave normally.
func (in *injector) do(ctx context.Context, blockUntilRelease bool) (error, bool) {
	if !in.once.CompareAndSwap(false, true) {
		return nil, false
	}
	switch in.what {
	case injectPanic:
		panic("injected")
	case injectGoexit:
		runtime.Goexit()
	case injectBlock:
		if blockUntilRelease {
			<-in.release
			return nil, true
		}
		<-ctx.Done()
		return ctx.Err(), true
	case injectCallBack:
		c := in.cons.Load()
		c.Pause()
		_ = c.Stats()
		c.Resume()
		in.closeErr <- c.Close(ctx)
	}
	return errors.New("injected"), true
}

type site struct {
	name string
	// make builds a consumer whose user function of this site calls in.do
	// at its first call, on a partition holding target (key a), after (key
	// a) and other (key b). applied is what is applied when all goes well.
	make    func(t *testing.T, opts []kgo.Opt, in *injector, st *store) (*seqkafka.Consumer, error)
	applied []string
}

func injectionSites() []site {
	apply := func(st *store, r *kgo.Record) { st.apply(r) }
	fast := seqkafka.WithRetries(3, fixedBackoff(0))
	return []site{{
		name: "handler",
		make: func(t *testing.T, opts []kgo.Opt, in *injector, st *store) (*seqkafka.Consumer, error) {
			return seqkafka.NewConsumer(opts, func(ctx context.Context, r *kgo.Record) error {
				if string(r.Value) == "target" {
					if err, ok := in.do(ctx, false); ok {
						return err
					}
				}
				apply(st, r)
				return nil
			}, fast)
		},
		applied: []string{"target", "after", "other"},
	}, {
		name: "batch handler",
		make: func(t *testing.T, opts []kgo.Opt, in *injector, st *store) (*seqkafka.Consumer, error) {
			return seqkafka.NewBatchConsumer(opts, func(ctx context.Context, rs []*kgo.Record) error {
				for _, r := range rs {
					if string(r.Value) == "target" {
						if err, ok := in.do(ctx, false); ok {
							return err
						}
					}
				}
				for _, r := range rs {
					apply(st, r)
				}
				return nil
			}, fast, seqkafka.WithBatch(10, time.Millisecond))
		},
		applied: []string{"target", "after", "other"},
	}, {
		name: "backoff",
		make: func(t *testing.T, opts []kgo.Opt, in *injector, st *store) (*seqkafka.Consumer, error) {
			var failed atomic.Bool
			return seqkafka.NewConsumer(opts, func(ctx context.Context, r *kgo.Record) error {
				if string(r.Value) == "target" && failed.CompareAndSwap(false, true) {
					return errors.New("first attempt fails")
				}
				apply(st, r)
				return nil
			}, seqkafka.WithRetries(3, func(ctx context.Context, r *kgo.Record, attempt int, err error) time.Duration {
				in.do(ctx, false)
				return 0
			}))
		},
		applied: []string{"target", "after", "other"},
	}, {
		name: "dead-letter function",
		make: func(t *testing.T, opts []kgo.Opt, in *injector, st *store) (*seqkafka.Consumer, error) {
			return seqkafka.NewConsumer(opts, func(ctx context.Context, r *kgo.Record) error {
				if string(r.Value) == "target" {
					return errors.New("always fails")
				}
				apply(st, r)
				return nil
			}, seqkafka.WithRetries(1, fixedBackoff(0)),
				seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
					if err, ok := in.do(ctx, false); ok {
						return err
					}
					apply(st, r)
					return nil
				}))
		},
		applied: []string{"target", "after", "other"},
	}, {
		name: "logger",
		make: func(t *testing.T, opts []kgo.Opt, in *injector, st *store) (*seqkafka.Consumer, error) {
			// target fails: the default dead-letter step logs it and drops it.
			return seqkafka.NewConsumer(opts, func(ctx context.Context, r *kgo.Record) error {
				if string(r.Value) == "target" {
					return errors.New("always fails")
				}
				apply(st, r)
				return nil
			}, seqkafka.WithRetries(1, nil), seqkafka.WithLogger(slog.New(&funcHandler{handle: func(ctx context.Context, r slog.Record) error {
				if r.Level >= slog.LevelError {
					in.do(ctx, true)
				}
				return nil
			}})))
		},
		applied: []string{"after", "other"},
	}}
}

// funcHandler is a slog.Handler enabled at every level that calls handle.
type funcHandler struct {
	handle func(context.Context, slog.Record) error
}

func (h *funcHandler) Enabled(context.Context, slog.Level) bool        { return true }
func (h *funcHandler) Handle(ctx context.Context, r slog.Record) error { return h.handle(ctx, r) }
func (h *funcHandler) WithAttrs([]slog.Attr) slog.Handler              { return h }
func (h *funcHandler) WithGroup(string) slog.Handler                   { return h }

// TestEveryCallSiteSurvivesItsUserCode injects, at each call site of user
// code, each misbehaviour, and checks the invariants: the key's next record
// runs only after the one whose call misbehaved has ended, other keys go
// on, nothing is lost (the final commit passes every record, except one
// still blocked), and Close returns (in time, when a call blocks).
func TestEveryCallSiteSurvivesItsUserCode(t *testing.T) {
	for _, s := range injectionSites() {
		for _, what := range []injection{injectError, injectPanic, injectGoexit, injectBlock, injectCallBack} {
			t.Run(fmt.Sprintf("%s/%v", s.name, what), func(t *testing.T) {
				checkInjection(t, s, what)
			})
		}
	}
}

func checkInjection(t *testing.T, s site, what injection) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "target"), rec(0, "a", "after"), rec(0, "b", "other")})
	w := watchCommits(c)
	st := newStore()
	in := newInjector(what)
	defer close(in.release)
	cons, err := s.make(t, groupOpts(c), in, st)
	require.NoError(t, err)
	in.cons.Store(cons)
	m := startMember(t, cons)

	want := s.applied
	switch {
	case what == injectBlock:
		// target is held, and after waits for it; other goes on, unless
		// it shares target's batch.
		want = []string{"other"}
		if s.name == "batch handler" {
			want = nil
		}
	}
	for _, v := range want {
		waitApplied(t, st, v)
	}
	if what == injectBlock {
		require.Eventually(t, in.once.Load, 10*time.Second, time.Millisecond, "the user function was not called")
		require.ErrorIs(t, m.close(t, 500*time.Millisecond), context.DeadlineExceeded)
		require.False(t, st.isApplied(0, 1), "after ran while target was held")
		return
	}
	if what == injectCallBack {
		require.ErrorIs(t, <-in.closeErr, seqsched.ErrWouldDeadlock)
	}
	// Every record ends; the final commit passes them all.
	require.NoError(t, m.close(t, 10*time.Second))
	require.ElementsMatch(t, want, st.values())
	st.checkOrder(t)
	seen := w.all()
	require.NotEmpty(t, seen)
	require.Equal(t, int64(3), seen[len(seen)-1].offset, "commits: %v", seen)
}

// waitApplied waits until the record of value v was applied.
func waitApplied(t *testing.T, st *store, v string) {
	t.Helper()
	require.Eventually(t, func() bool { return slices.Contains(st.values(), v) }, 10*time.Second, time.Millisecond,
		"%q was not applied; applied %v", v, st.values())
}

// values returns the values of the records applied.
func (s *store) values() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.vals)
}

// Close called from a handler with the handler's ctx cannot wait for that
// handler: it returns ErrWouldDeadlock at once and closes in the
// background; a later Close waits for that close.
func TestCloseFromAHandlerBeginsTheCloseAndReturnsErrWouldDeadlock(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "stop"), rec(0, "b", "")})
	st := newStore()
	var cons *seqkafka.Consumer
	closed := make(chan error, 1)
	var once sync.Once
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "stop" {
			once.Do(func() { closed <- cons.Close(ctx) })
		}
		st.apply(r)
		return nil
	})
	require.NoError(t, err)
	m := startMember(t, cons)
	require.ErrorIs(t, <-closed, seqsched.ErrWouldDeadlock)
	<-m.done // Run returns once the close stopped it
	require.NoError(t, m.err)
	require.NoError(t, cons.Close(context.Background()), "a later Close waits for the close begun")
	require.True(t, st.isApplied(0, 0), "the handler that called Close finished")
}
