// Package contain calls user code so that whatever it does, its caller
// goes on: a return, a panic (recovered into an error with its stack) and a
// runtime.Goexit are told apart, and the last two become errors; a call
// that does not return holds its caller up only until the caller's ctx
// ends.
package contain

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// A Reader calls one function (a StatsReader's Stats) for the collections
// of a metric reader, which each pass a ctx, on the SDK's goroutines. It
// runs f on a goroutine of its own and waits for it or for the ctx,
// whichever comes first, so that
//
//   - a runtime.Goexit in f ends that goroutine rather than the caller's
//     (the reader's, in the middle of a collection, holding the SDK
//     pipeline's lock);
//   - an f that blocks holds the collection up only until its ctx ends
//     (the PeriodicReader's timeout), not for ever, and the reader goes
//     on with its next collection;
//   - at most one call of f runs at a time: a Read that comes while a call
//     is still running, stuck or not, waits for that call's result rather
//     than starting another, so an f that never returns leaves one
//     goroutine behind, not one per collection. Its result is the one
//     every Read waiting for it gets, and it is dropped if none is.
//
// No lock is held while f runs. (seqprom/internal/contain is the same without
// the ctx: a Prometheus Gather has none. The two modules share no
// package.)
type Reader[T any] struct {
	site string // names the call in errors
	f    func() T

	mu      sync.Mutex
	running *call[T] // the call in progress, nil if none
}

// call is one run of f; done is closed once v and err are set.
type call[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// NewReader returns a Reader of f. site names the call in errors
// ("seqotel: Stats").
func NewReader[T any](site string, f func() T) *Reader[T] {
	return &Reader[T]{site: site, f: f}
}

// Read returns f's result, or the error saying that f panicked (with the
// value and stack) or called runtime.Goexit, or, if ctx ends first, an
// error wrapping ctx's.
func (r *Reader[T]) Read(ctx context.Context) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s not called: %w", r.site, err)
	}
	r.mu.Lock()
	c := r.running
	if c == nil {
		c = &call[T]{done: make(chan struct{})}
		r.running = c
		go r.run(c)
	}
	r.mu.Unlock()
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		return zero, fmt.Errorf("%s has not returned: %w", r.site, ctx.Err())
	}
}

// run calls f for c, tells its return, panic and Goexit apart with two
// nested defers, and ends c: the next Read starts a new call.
func (r *Reader[T]) run(c *call[T]) {
	normal, recovered := false, false
	defer func() {
		if !normal && !recovered {
			c.err = fmt.Errorf("%s called runtime.Goexit", r.site)
		}
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
		close(c.done)
	}()
	func() {
		defer func() {
			if !normal {
				if p := recover(); p != nil {
					recovered = true
					c.err = fmt.Errorf("%s panicked: %v\n%s", r.site, p, debug.Stack())
				}
			}
		}()
		c.v = r.f()
		normal = true
	}()
}
