package seqkafka_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqkafka"
)

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
func logged(name string, log *calls) seqkafka.Interceptor {
	return func(ctx context.Context, r *kgo.Record, next func(context.Context) error) error {
		log.add("%s>%d", name, seqkafka.Attempt(ctx))
		tags, _ := ctx.Value(tagKey{}).(string)
		err := next(context.WithValue(ctx, tagKey{}, tags+name))
		log.add("%s<%v", name, err)
		return err
	}
}

// Interceptors nest around each handler call, the first outermost; the
// ctx they pass on reaches the handler, still telling the attempt.
func TestInterceptorsWrapEachHandlerCallFirstOutermost(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "x")})
	st := newStore()
	log := &calls{}
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		n := seqkafka.Attempt(ctx)
		log.add("handler %d %v", n, ctx.Value(tagKey{}))
		if n == 1 {
			return errors.New("once")
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)),
		seqkafka.WithInterceptor(logged("outer", log)), seqkafka.WithInterceptor(logged("inner", log)))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	require.NoError(t, m.close(t, 10*time.Second))
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
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "panics"), rec(0, "b", "fails"), rec(0, "c", "succeeds")})
	st := newStore()
	log := &calls{}
	var mu sync.Mutex
	dead := map[string]error{}
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		switch string(r.Value) {
		case "panics":
			panic("boom")
		case "fails":
			return errors.New("fails")
		}
		return nil
	}, seqkafka.WithRetries(1, nil),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			mu.Lock()
			dead[string(r.Value)] = err
			mu.Unlock()
			st.apply(r)
			return nil
		}),
		seqkafka.WithInterceptor(func(ctx context.Context, r *kgo.Record, next func(context.Context) error) error {
			defer func() {
				if v := recover(); v != nil {
					log.add("%s: recovered %v", r.Value, v)
					panic(v)
				}
			}()
			if err := next(ctx); err == nil {
				return errors.New("turned into a failure")
			}
			st.apply(r) // a failure turned into a success: done
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(3)
	require.NoError(t, m.close(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, dead, 2, "dead-lettered: %v", dead)
	var pe *seqsched.PanicError
	require.ErrorAs(t, dead["panics"], &pe, "the attempt's error")
	require.Equal(t, "boom", pe.Value)
	require.EqualError(t, dead["succeeds"], "turned into a failure")
	require.Equal(t, []string{"panics: recovered boom"}, log.all())
	require.Equal(t, uint64(1), cons.Stats().Processed, "processed: the failure turned into a success")
}

func TestNewBatchConsumerRejectsWithInterceptor(t *testing.T) {
	c := cluster(t, 1)
	_, err := seqkafka.NewBatchConsumer(groupOpts(c), func(context.Context, []*kgo.Record) error { return nil },
		seqkafka.WithInterceptor(func(ctx context.Context, _ *kgo.Record, next func(context.Context) error) error { return next(ctx) }))
	require.EqualError(t, err, "seqkafka: WithInterceptor(f): only with NewConsumer: a batch call handles many records: invalid option")
}

// An interceptor's own panic and runtime.Goexit are failed attempts, as a
// handler's are: the backoff sees a *seqsched.PanicError, then an error
// wrapping seqsched.ErrGoexit, and the third attempt runs the handler.
func TestInterceptorPanicOrGoexitIsAFailedAttempt(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "x")})
	st := newStore()
	var mu sync.Mutex
	var seen []error
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(3, func(_ context.Context, _ *kgo.Record, _ int, err error) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, err)
		return 0
	}), seqkafka.WithInterceptor(func(ctx context.Context, r *kgo.Record, next func(context.Context) error) error {
		switch seqkafka.Attempt(ctx) {
		case 1:
			panic("interceptor")
		case 2:
			runtime.Goexit()
		}
		return next(ctx)
	}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	require.NoError(t, m.close(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2, "failed attempts the backoff saw: %v", seen)
	var pe *seqsched.PanicError
	require.ErrorAs(t, seen[0], &pe, "attempt 1")
	require.Equal(t, "interceptor", pe.Value, "attempt 1's panic value")
	require.ErrorIs(t, seen[1], seqsched.ErrGoexit, "attempt 2")
	require.Equal(t, uint64(1), cons.Stats().Processed, "processed")
}
