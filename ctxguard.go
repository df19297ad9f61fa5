package seqsched

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// guard is a submitter's ctx as package context sees it, when a task's
// ctx watches it: every method goes through try; once one panicked, the
// ctx counts as canceled for good (Done closed, Err Canceled), and a Done
// closed with a nil Err reads as Canceled, so that package context never
// finds the "missing cancel error" it panics on.
type guard struct {
	p      context.Context
	broken atomic.Bool
	c      *ctxState // whose watch this is: a Goexit in p's code latches its end
}

// exited runs, deferred, when p's code called runtime.Goexit on a goroutine
// of package context (which then never delivers the end it was watching
// for): the ctx counts as canceled, and the task's ctx ends now.
func (g *guard) exited(normal *bool) {
	if *normal {
		return
	}
	g.broken.Store(true)
	if g.c != nil {
		g.c.latch(context.Canceled, nil)
	}
}

func (g *guard) Deadline() (time.Time, bool) {
	if g.broken.Load() {
		return time.Time{}, false
	}
	d, perr := try(callDeadline, g.p)
	if perr != nil {
		return time.Time{}, false
	}
	return d.d, d.ok
}

func (g *guard) Done() <-chan struct{} {
	normal := false
	defer g.exited(&normal)
	r := g.done()
	normal = true
	return r
}

func (g *guard) done() <-chan struct{} {
	if g.broken.Load() {
		return closedChan
	}
	ch, perr := ctxDone(g.p)
	if perr != nil {
		g.broken.Store(true)
		return closedChan
	}
	return ch
}

func (g *guard) Err() error {
	normal := false
	defer g.exited(&normal)
	r := g.err()
	normal = true
	return r
}

func (g *guard) err() error {
	if g.broken.Load() {
		return context.Canceled
	}
	if err := parentErr(g.p); err != nil {
		return err
	}
	select {
	case <-g.Done():
		return context.Canceled // a broken ctx: Done closed, Err nil
	default:
		return nil
	}
}

func (g *guard) Value(key any) any {
	normal := false
	defer g.exited(&normal)
	r := g.value(key)
	normal = true
	return r
}

func (g *guard) value(key any) any {
	if g.broken.Load() {
		return nil
	}
	v, perr := try(callValue, valueCall{g.p, key})
	if perr != nil {
		return nil
	}
	return v
}

func (g *guard) String() string { return fmt.Sprintf("guard(%T)", g.p) }
