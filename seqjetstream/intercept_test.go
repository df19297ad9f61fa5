package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqjetstream"
)

// The interceptor tests kafka's intercept_test.go has under the same
// names, for the same rules (docs/brokers.md).

type tagKey struct{}

// calls is a log of interceptor and handler calls, safe for concurrent use.
type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

func (c *calls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// logged is an interceptor that logs its entry and exit with the attempt,
// and adds its name to the ctx's tags.
func logged(name string, log *calls) seqjetstream.Interceptor {
	return func(ctx context.Context, msg jetstream.Msg, next func(context.Context) error) error {
		log.add("%s>%d", name, seqjetstream.Attempt(ctx))
		tags, _ := ctx.Value(tagKey{}).(string)
		err := next(context.WithValue(ctx, tagKey{}, tags+name))
		log.add("%s<%v", name, err)
		return err
	}
}

// Interceptors nest around each handler call, the first outermost; the
// ctx they pass on reaches the handler, still telling the attempt.
func TestInterceptorsWrapEachHandlerCallFirstOutermost(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	log := &calls{}
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		n := seqjetstream.Attempt(ctx)
		log.add("handler %d %v", n, ctx.Value(tagKey{}))
		if n == 1 {
			return errors.New("once")
		}
		return nil
	}, seqjetstream.WithRetries(2, fast),
		seqjetstream.WithInterceptor(logged("outer", log)), seqjetstream.WithInterceptor(logged("inner", log)))
	start(t, c)
	publish(t, f.js, "k.a", "x")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "%+v", statsOf(c))
	require.Equal(t, []string{
		"outer>1", "inner>1", "handler 1 outerinner", "inner<once", "outer<once",
		"outer>2", "inner>2", "handler 2 outerinner", "inner<<nil>", "outer<<nil>",
	}, log.all(), "calls")
}

// What the interceptor returns is the attempt's outcome, and a handler's
// panic unwinds through it: here one recovers and panics again (as a
// tracer does), another turns a success into a failure and a failure into
// a success.
func TestInterceptorSeesTheHandlerPanicAndDecidesTheOutcome(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	log := &calls{}
	var mu sync.Mutex
	dead := map[string]error{}
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		switch string(m.Data()) {
		case "panics":
			panic("boom")
		case "fails":
			return errors.New("fails")
		}
		return nil
	}, seqjetstream.WithRetries(1, nil),
		seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, attempts int, err error) error {
			mu.Lock()
			dead[string(m.Data())] = err
			mu.Unlock()
			return nil
		}),
		seqjetstream.WithInterceptor(func(ctx context.Context, m jetstream.Msg, next func(context.Context) error) error {
			defer func() {
				if v := recover(); v != nil {
					log.add("%s: recovered %v", m.Data(), v)
					panic(v)
				}
			}()
			if err := next(ctx); err == nil {
				return errors.New("turned into a failure")
			}
			return nil // a failure turned into a success: done
		}))
	start(t, c)
	publish(t, f.js, "k.a", "panics")
	publish(t, f.js, "k.b", "fails")
	publish(t, f.js, "k.c", "succeeds")
	eventually(t, func() bool { st := c.Stats(); return st.Acked == 1 && st.DeadLettered == 2 }, "%+v", statsOf(c))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, dead, 2, "dead-lettered: %v", dead)
	var pe *seqsched.PanicError
	require.ErrorAs(t, dead["panics"], &pe, "the attempt's error")
	require.Equal(t, "boom", pe.Value)
	require.EqualError(t, dead["succeeds"], "turned into a failure")
	require.Equal(t, []string{"panics: recovered boom"}, log.all())
}

// An interceptor's own panic and runtime.Goexit are failed attempts, as a
// handler's are: the backoff sees a *seqsched.PanicError, then an error
// wrapping seqsched.ErrGoexit, and the third attempt runs the handler.
func TestInterceptorPanicOrGoexitIsAFailedAttempt(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	var mu sync.Mutex
	var seen []error
	c := f.consumer(t, func(context.Context, jetstream.Msg) error { return nil },
		seqjetstream.WithRetries(3, func(_ context.Context, _ jetstream.Msg, _ int, err error) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, err)
			return 0
		}), seqjetstream.WithInterceptor(func(ctx context.Context, msg jetstream.Msg, next func(context.Context) error) error {
			switch seqjetstream.Attempt(ctx) {
			case 1:
				panic("interceptor")
			case 2:
				runtime.Goexit()
			}
			return next(ctx)
		}))
	start(t, c)
	publish(t, f.js, "k.a", "x")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "%+v", statsOf(c))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2, "failed attempts the backoff saw: %v", seen)
	var pe *seqsched.PanicError
	require.ErrorAs(t, seen[0], &pe, "attempt 1")
	require.Equal(t, "interceptor", pe.Value, "attempt 1's panic value")
	require.ErrorIs(t, seen[1], seqsched.ErrGoexit, "attempt 2")
}
