package seqwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"

	"github.com/seqsched/seqsched/seqwatermill"
)

type tagKey struct{}

// Interceptors wrap each hand-over, the first outermost; the ctx one
// passes to next is the copy's, which the handler reads; next reports the
// consumer's Nack as ErrNacked; Attempt(ctx) tells the attempt.
func TestInterceptorsWrapEachAttempt(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	tag := func(name string) seqwatermill.Interceptor {
		return func(ctx context.Context, m *message.Message, next func(context.Context) error) error {
			err := next(context.WithValue(ctx, tagKey{}, fmt.Sprint(ctx.Value(tagKey{}), name)))
			mu.Lock()
			calls = append(calls, fmt.Sprintf("%s %s attempt %d: %v", name, m.UUID, seqwatermill.Attempt(ctx), err))
			mu.Unlock()
			return err
		}
	}
	r := newReleasing(1)
	a1 := msg("a1", "a")
	r.in <- a1
	_, out := subscribe(t, r, seqwatermill.WithRetries(0, noBackoff),
		seqwatermill.WithInterceptor(tag("outer")), seqwatermill.WithInterceptor(tag("inner")))
	first := next(t, out)
	assert.Equal(t, "<nil>outerinner", first.Context().Value(tagKey{}), "the copy's ctx")
	assert.Equal(t, 1, seqwatermill.Attempt(first.Context()))
	first.Nack()
	second := next(t, out)
	assert.Equal(t, 2, seqwatermill.Attempt(second.Context()))
	second.Ack()
	<-a1.Acked() // after the interceptors returned
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"inner a1 attempt 1: " + seqwatermill.ErrNacked.Error(),
		"outer a1 attempt 1: " + seqwatermill.ErrNacked.Error(),
		"inner a1 attempt 2: <nil>",
		"outer a1 attempt 2: <nil>",
	}, calls)
}

// An interceptor's error is a Nack: the message is retried in place.
func TestInterceptorErrorIsANack(t *testing.T) {
	r := newReleasing(1)
	a1 := msg("a1", "a")
	r.in <- a1
	failed := false
	_, out := subscribe(t, r, seqwatermill.WithRetries(0, noBackoff),
		seqwatermill.WithInterceptor(func(ctx context.Context, m *message.Message, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return err
			}
			if !failed {
				failed = true
				return errors.New("span export failed")
			}
			return nil
		}))
	next(t, out).Ack() // the interceptor fails this attempt anyway
	next(t, out).Ack()
	<-a1.Acked()
	assert.True(t, failed)
}
