package seqsched

import (
	"context"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"weak"
)

// User code: where the scheduler calls it, and how.
//
// User code is everything the scheduler is handed and calls: a task's fn,
// every method of a ctx a caller passes (the submit ctx kept with a task,
// and the ctx of Remove, Close, Discard, Shutdown and Await), the
// WithLogger handler, the WithWeight function and the WithErrorHandler
// function. It runs only at the call sites below, each with no lock of the
// scheduler held, each through try, which tells a normal return, a panic
// (recovered into a *PanicError with its stack) and a runtime.Goexit apart.
//
//	site          what runs                        goroutine       a panic               a Goexit
//	siteFn        a task's fn (Future.exec,        worker          resolves the task     resolves it with
//	              posted.exec)                                     with a *PanicError    ErrGoexit; take-over
//	siteSubmitCtx the submit ctx's Err before a    worker          the task is skipped   skipped with ErrGoexit;
//	              task starts (worker.start)                       with the *PanicError  take-over
//	siteWeight    WithWeight's function, once per  worker          weight 1, logged      weight 1; take-over
//	              turn (worker.beginTurn)                          once                  (logged once)
//	siteHandler   WithErrorHandler's function      worker          logged                take-over; the next
//	              (worker.reportTask)                                                    report goes on
//	siteLogger    the slog handler: Enabled,       worker          the record is         take-over; the next
//	              Handle (worker.log)                              dropped               record goes on
//	siteCtxStop   ending a finished task's ctx:    worker          ignored               take-over
//	              the submit ctx's AfterFunc stop
//	              or Done and Value (task.over)
//	(watch)       the submit ctx's Err when it is  a goroutine of  the task ctx ends     the task ctx ends
//	              done (ctxState.watch, guard)     package context with Canceled         with Canceled
//	(caller ctx)  Value, Done, Err of the ctx      the caller's    the call returns      the caller's
//	              given to Remove, Close, Discard,                 the *PanicError       goroutine ends; the
//	              Shutdown or Await (callerOf,                                           scheduler's state is
//	              ctxDone, ctxErr)                                                       whole
//
// The last two rows run on no worker, so they have no site constant: they
// call try directly (ctxguard.go, taskctx.go).
//
// Take-over: a worker keeps everything it needs in its struct, and before
// it calls user code it records the site and the step to go on with. If
// that code calls runtime.Goexit, the goroutine cannot be saved, but the
// worker can: the goroutine's deferred carryOn applies the site's outcome
// (the table's last column) and starts the same worker again on a fresh
// goroutine, with its live token, its slot, its session and its task. No
// user code runs on the dying goroutine.
//
// Re-entry: any of this code may call any public operation of the
// scheduler, on its own session or any other. Operations that never wait
// (Submit, Go, Post, Open, Queued, Stats) just run. Operations that wait
// (Remove, Close, Discard, Shutdown, Await) first find out who calls them
// (callerOf): the running task whose ctx, or a ctx derived from it, was
// passed, and the worker whose goroutine the call runs on. A wait that
// could only end once that task or worker went on returns
// ErrWouldDeadlock instead, having done the rest of its work (a drain
// begun, a Shutdown begun); any other wait under WithMaxConcurrency lends
// the caller's slot while it waits. Identifying the goroutine costs a stack
// walk (about 0.3 to 1.5 µs), so Remove, Close, Discard and Shutdown do it
// whenever they would wait, and Await, which request handlers call on their
// hot path, only while some worker of the scheduler is in a callback other
// than fn and the submit ctx's Err (core.callbacks): a task, and its submit
// ctx, are known to Await by the task's ctx.
//
// A worker's identity is its index in a process-wide registry, written on
// its goroutine's stack as a chain of calls, one of sixteen functions per
// hexadecimal digit (tag0..tagF, then tagEnd), below the worker's loop; a
// stack walk from any code the worker calls finds the chain and reads the
// index back. The frames show in stack traces of code a worker runs.

// site names a place where the scheduler runs user code (see the table).
type site uint8

const (
	siteNone site = iota
	siteFn
	siteSubmitCtx
	siteWeight
	siteHandler
	siteLogger
	siteCtxStop
)

// try returns f(a), user code, and the panic it recovered, if any. If f
// calls runtime.Goexit, try does not return: the goroutine unwinds on
// through its callers' deferred calls (on a worker, to carryOn). try is
// the package's only recover of user code (checkKey's recovers the
// runtime's own panic). a and the result go by value, so that nothing of
// the caller's escapes to the heap through f.
func try[A, R any](f func(A) R, a A) (r R, perr *PanicError) {
	normal := false
	defer func() {
		if normal {
			return
		}
		if v := recover(); v != nil {
			perr = &PanicError{Value: v, Stack: debug.Stack()}
		}
		// recover() == nil: runtime.Goexit, which no deferred call stops.
	}()
	if checkLocks.Load() {
		lockedUserCode()
	}
	r = f(a)
	normal = true
	return r, nil
}

// ident is a worker's identity: its index in the registry. The registry
// holds it weakly, so a worker that its pool drops frees its index.
type ident struct {
	index int
	owner any // the *worker[K]
}

var registry struct {
	mu   sync.Mutex
	all  []weak.Pointer[ident]
	free []int
}

func newIdent(owner any) *ident {
	id := &ident{owner: owner}
	registry.mu.Lock()
	if n := len(registry.free); n > 0 {
		id.index = registry.free[n-1]
		registry.free = registry.free[:n-1]
		registry.all[id.index] = weak.Make(id)
	} else {
		id.index = len(registry.all)
		registry.all = append(registry.all, weak.Make(id))
	}
	registry.mu.Unlock()
	runtime.AddCleanup(id, freeIdent, id.index)
	return id
}

func freeIdent(index int) {
	registry.mu.Lock()
	registry.free = append(registry.free, index)
	registry.mu.Unlock()
}

// lookupIdent returns the owner of the identity with index i, if it is
// alive.
func lookupIdent(i int) any {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if i < 0 || i >= len(registry.all) {
		return nil
	}
	if id := registry.all[i].Value(); id != nil {
		return id.owner
	}
	return nil
}

// tagged calls f below a chain of frames that spells index, least
// significant digit outermost.
func tagged(index int, f func()) {
	if index == 0 {
		tagEnd(f)
		return
	}
	tags[index&15](index>>4, f)
}

var tags [16]func(int, func())

//go:noinline
func tag0(i int, f func()) { tagged(i, f) }

//go:noinline
func tag1(i int, f func()) { tagged(i, f) }

//go:noinline
func tag2(i int, f func()) { tagged(i, f) }

//go:noinline
func tag3(i int, f func()) { tagged(i, f) }

//go:noinline
func tag4(i int, f func()) { tagged(i, f) }

//go:noinline
func tag5(i int, f func()) { tagged(i, f) }

//go:noinline
func tag6(i int, f func()) { tagged(i, f) }

//go:noinline
func tag7(i int, f func()) { tagged(i, f) }

//go:noinline
func tag8(i int, f func()) { tagged(i, f) }

//go:noinline
func tag9(i int, f func()) { tagged(i, f) }

//go:noinline
func tagA(i int, f func()) { tagged(i, f) }

//go:noinline
func tagB(i int, f func()) { tagged(i, f) }

//go:noinline
func tagC(i int, f func()) { tagged(i, f) }

//go:noinline
func tagD(i int, f func()) { tagged(i, f) }

//go:noinline
func tagE(i int, f func()) { tagged(i, f) }

//go:noinline
func tagF(i int, f func()) { tagged(i, f) }

//go:noinline
func tagEnd(f func()) { f() }

// digitOf maps the entry PC of tag0..tagF to its digit; tagEndPC is
// tagEnd's.
var (
	digitOf  = map[uintptr]int{}
	tagEndPC = reflect.ValueOf(tagEnd).Pointer()
)

func init() {
	tags = [16]func(int, func()){tag0, tag1, tag2, tag3, tag4, tag5, tag6, tag7,
		tag8, tag9, tagA, tagB, tagC, tagD, tagE, tagF}
	for d, f := range tags {
		digitOf[reflect.ValueOf(f).Pointer()] = d
	}
}

// currentIdent returns the owner of the worker identity written on the
// calling goroutine's stack, or nil if there is none.
func currentIdent() any {
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	// Innermost first: find tagEnd, then read the digits outwards, most
	// significant first.
	i := 0
	for ; i < len(pcs); i++ {
		if entryOf(pcs[i]) == tagEndPC {
			break
		}
	}
	if i == len(pcs) {
		return nil
	}
	index := 0
	for _, pc := range pcs[i+1:] {
		d, ok := digitOf[entryOf(pc)]
		if !ok {
			if isTagged(pc) {
				continue // tagged itself, if the compiler kept its frame
			}
			break
		}
		index = index<<4 | d
	}
	return lookupIdent(index)
}

var taggedPC = reflect.ValueOf(tagged).Pointer()

func isTagged(pc uintptr) bool { return entryOf(pc) == taggedPC }

func entryOf(pc uintptr) uintptr {
	if f := runtime.FuncForPC(pc - 1); f != nil {
		return f.Entry()
	}
	return 0
}

// call runs f(a), user code at st, on w's goroutine (see callsite.go).
func call[K comparable, A, R any](w *worker[K], st site, f func(A) R, a A) (R, *PanicError) {
	w.site = st
	r, perr := try(f, a)
	w.site = siteNone
	return r, perr
}

// callback is call for user code other than fn and the submit ctx's Err:
// while it runs, Await looks for its caller's worker (see callsite.go).
func callback[K comparable, A, R any](w *worker[K], st site, f func(A) R, a A) (R, *PanicError) {
	w.s.core.callbacks.Add(1)
	r, perr := call(w, st, f, a)
	w.s.core.callbacks.Add(-1)
	return r, perr
}

// isCallback reports whether code at st counts in Scheduler.callbacks.
func (st site) isCallback() bool { return st >= siteWeight }

// caller is who makes a call that may wait: the running task whose ctx, or
// a ctx derived from it, was passed, and the worker whose goroutine the
// call runs on, while it runs user code (see callsite.go).
type caller[K comparable] struct {
	t *task
	w *worker[K]
}

// callerOf finds who calls with ctx (ctx.Value is the caller's code: a
// panic there is returned), and the calling goroutine's worker.
func (s *Scheduler[K]) callerOf(ctx context.Context) (c caller[K], err error) {
	t, err := runningTask(ctx)
	if err != nil {
		return c, err
	}
	if t != nil && t.lanes.core == &s.core {
		c.t = t
	}
	c.w = s.currentWorker()
	return c, nil
}

// currentWorker returns the worker of s whose goroutine calls, if any.
func (s *Scheduler[K]) currentWorker() *worker[K] {
	if w, ok := currentIdent().(*worker[K]); ok && w.s == s && w.site != siteNone {
		return w
	}
	return nil
}

// runs reports whether waiting for sess to be forgotten would wait for the
// caller: sess, or a predecessor it is held back behind, is the session of
// the caller's task or worker. Called with sess's shard lock held.
func (c caller[K]) runs(sess *session[K]) bool {
	for p := sess; p != nil; p = p.pred {
		if (c.t != nil && c.t.lanes == &p.lanes) || (c.w != nil && c.w.sess == p) {
			return true
		}
	}
	return false
}

// reports reports whether the caller is a reporter (a callback it runs:
// the error handler, the logger) that must not wait for d, the drain of
// sess: d waits for it, or it is a Discard's reporter (drains wait for
// it) of sess's key. Such a reporter counts as run for every session of
// its key, as a worker does for its session and the successors behind it:
// two reporters of one key, each in a callback waiting for the drain of a
// session the other's drain waits for (a successor; the closing session),
// would otherwise wait for each other for ever. A forced Shutdown's
// reporter, which no drain waits for, counts as neither.
func (c caller[K]) reports(sess *session[K], d *drain) bool {
	if c.w == nil || len(c.w.drains) == 0 {
		return false
	}
	for _, x := range c.w.drains {
		if x == d {
			return true
		}
	}
	for _, t := range c.w.dropped {
		if p, ok := t.job.(*posted[K]); ok && p.key == sess.key {
			return true
		}
	}
	return false
}

// slot is the lent-slot state of the caller's slot, if it holds one: a
// task's (shared by the waits of every goroutine using its ctx), or the
// worker's while it runs a callback.
func (c caller[K]) slot() *lentSlot {
	switch {
	case c.t != nil && c.t.lanes.core.owner.limited():
		return c.t.slotState()
	case c.t != nil:
		return nil
	case c.w != nil && c.w.slot && c.w.site == siteFn:
		return c.w.t.slotState()
	case c.w != nil && c.w.slot:
		return &c.w.lent
	}
	return nil
}

// fromCallback tells Await, called from no running task of its ctx,
// whether its wait for a task queued on l could never end because the
// caller is a callback a worker runs for that session, or else the
// callback's slot to lend (see owner).
func (s *Scheduler[K]) fromCallback(l *lanes) (deadlock bool, ls *lentSlot) {
	if s.core.callbacks.Load() == 0 {
		return false, nil
	}
	w := s.currentWorker()
	if w == nil {
		return false, nil
	}
	if w.sess != nil && heldBehind(l, &w.sess.lanes) {
		return true, nil
	}
	return false, caller[K]{w: w}.slot()
}
