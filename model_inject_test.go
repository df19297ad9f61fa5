package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched"
)

// The hostile layer of the model test: user code that misbehaves at every
// call site the scheduler has (issue 25), Discard and counted handles
// (issue 26). Most plans get one on top of the base plan that genPlan
// reads from the bytes: it is drawn from a PCG seeded with a hash of the
// same bytes, so that the base plan of every recorded seed stays what it
// was (plan.plain strips the layer off again). A layer adds:
//
//   - options: WithErrorHandler (two plans in three), WithLogger with a
//     slog handler the test controls (always), WithWeight (one in three,
//     with a weight out of range for some keys), WithRate (one in three,
//     pacing no key) and WithInterceptor (one in three);
//   - on the base plan's ops: Post instead of Submit or Go (by key or
//     through a handle);
//   - ops of its own: Open (handles are counted: several per key), Close of
//     one of a key's handles, Discard by key or through a handle, Queued by
//     key and through each handle, a nil and a zero *Session, Posts, and
//     Scheduler.Close (rarely: it ends the plan's work);
//   - an action script for each call site of user code (hsite): each time
//     the scheduler calls that code, the next action of the site's script
//     runs (an atomic index; once a script is used up, the code returns
//     normally): return, panic, runtime.Goexit, a panic raised while a
//     Goexit unwinds, a Goexit called while a panic unwinds, block until a
//     gate of the plan is released, or call back with a public operation
//     on its own key, another key or the scheduler (the interceptor's
//     script has the endings only, played after next: see intercept).
//
// Every ctx is well behaved (the core trusts ctxs): a callback re-enters
// with the ctx it was given (fn's, the error handler's, the logger's), or
// one derived from it, since re-entry is known by ctx alone. The weight
// function is given no ctx: it makes no call that waits.
//
// A call back must return within a bound with a result that holds (see
// callback and end). Waits would deadlock the test itself if they formed
// a cycle, so a call that may wait (Remove, Close, Discard, Await) waits
// only on its own key (the scheduler must answer ErrWouldDeadlock, or not
// wait on itself) or on a higher key, as the base plan's Awaits do; on a
// lower key, and from the logger's Enabled (which does not know its key),
// it gets a ctx that is already canceled (derived from its own, so that
// the scheduler still knows who calls).

// hsite is a call site of user code that the injector plays.
type hsite uint8

const (
	hsFn         hsite = iota // a task's fn, before its behaviour
	hsHandler                 // WithErrorHandler's function
	hsLogEnabled              // the slog handler's Enabled
	hsLogHandle               // the slog handler's Handle
	hsWeight                  // WithWeight's function
	hsRate                    // WithRate's function (it leaves keys unpaced)
	hsIntercept               // WithInterceptor's function, once next returned or while fn unwinds
	nSites
)

var siteNames = [...]string{"fn", "handler", "log.Enabled", "log.Handle", "weight", "rate", "intercept"}

func (s hsite) String() string { return siteNames[s] }

type akind uint8

const (
	aReturn akind = iota
	aPanic
	aGoexit
	aBlock       // until gate action.gate is released
	aCall        // call back with action.op
	aPanicGoexit // panic from a deferred call while a runtime.Goexit unwinds
	aGoexitPanic // runtime.Goexit from a deferred call while a panic unwinds
	nAkinds
)

var akindNames = [...]string{"return", "panic", "goexit", "block", "call", "panic-in-goexit", "goexit-in-panic"}

// cop is a public operation a callback makes.
type cop uint8

const (
	cSubmit cop = iota
	cGo
	cPost
	cOpen
	cClose
	cRemove
	cDiscard
	cQueued
	cStats
	cAwait
	cShutdown
	cCloseAll // Scheduler.Close
	nCops
)

var copNames = [...]string{"Submit", "Go", "Post", "Open", "Close", "Remove", "Discard", "Queued", "Stats",
	"Await", "Shutdown", "Scheduler.Close"}

func (c cop) String() string { return copNames[c] }

// waits reports whether c may wait for other work.
func (c cop) waits() bool {
	return c == cClose || c == cRemove || c == cDiscard || c == cAwait || c == cShutdown
}

type ctarget uint8

const (
	tOwn   ctarget = iota // the key the code runs for
	tOther                // another key
	tSched                // the scheduler (Stats, Shutdown, Close ignore the key)
)

type action struct {
	kind akind
	gate int // aBlock
	op   cop // aCall
	tgt  ctarget
	n    int // aCall: which other key, which handle, the priority, by key or through a handle
}

func (a action) String() string {
	switch a.kind {
	case aReturn:
		return "ret"
	case aPanic:
		return "panic"
	case aGoexit:
		return "goexit"
	case aBlock:
		return fmt.Sprintf("block(%d)", a.gate)
	case aPanicGoexit:
		return "panic-in-goexit"
	case aGoexitPanic:
		return "goexit-in-panic"
	}
	return fmt.Sprintf("%v(%v,%d)", a.op, []string{"own", "other", "sched"}[a.tgt], a.n)
}

// layer is the hostile part of a plan.
type layer struct {
	handler bool
	// resumeOnHalt: the error handler (or the log) resumes a key it is told
	// halted at once, a policy HaltOnError's doc allows.
	resumeOnHalt bool
	weights      []int // WithWeight's answer per key (0 and 101 are out of range); nil: no WithWeight
	rate         bool  // WithRate, whose function plays its site's script and paces no key
	intercept    bool  // WithInterceptor, whose function plays its site's script (endings only) after fn
	scripts      [nSites][]action
}

func (l *layer) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hostile: WithErrorHandler=%v WithWeight=%v WithRate=%v WithInterceptor=%v WithLogger(test handler) resume on halt=%v\n",
		l.handler, l.weights, l.rate, l.intercept, l.resumeOnHalt)
	for s, sc := range l.scripts {
		if len(sc) > 0 {
			fmt.Fprintf(&b, "  %-12v %v\n", hsite(s), sc)
		}
	}
	return b.String()
}

// randChooser draws a layer's choices.
type randChooser struct{ *rand.Rand }

func (c randChooser) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return c.IntN(n)
}

// genLayer adds a hostile layer to p, drawn from a hash of data; one plan
// in five stays as the base generator made it.
func genLayer(data []byte, p *plan) {
	h := fnv.New64a()
	h.Write(data)
	lr := randChooser{rand.New(rand.NewPCG(h.Sum64(), 0x1a7e5))}
	if lr.IntN(5) == 0 {
		return
	}
	l := &layer{handler: lr.IntN(3) != 0}
	if lr.IntN(3) == 0 {
		l.weights = make([]int, p.keys)
		for k := range l.weights {
			switch x := lr.IntN(8); x {
			case 0:
				l.weights[k] = 0
			case 1:
				l.weights[k] = seqsched.MaxWeight + 1
			default:
				l.weights[k] = 1 + x%3
			}
		}
	}
	for s := range nSites {
		if s == hsRate || s == hsIntercept || lr.IntN(4) == 0 {
			continue // a quiet site (the rate's and the interceptor's are drawn last)
		}
		for range lr.IntN(14) {
			l.scripts[s] = append(l.scripts[s], genAction(lr, p))
		}
	}
	var ops []op
	for _, o := range p.ops {
		for lr.IntN(4) == 0 {
			ops = append(ops, genLayerOp(lr, p))
		}
		if o.kind == opSubmit {
			o.post = lr.IntN(3) == 0
		}
		ops = append(ops, o)
	}
	p.ops, p.layer = ops, l
	l.resumeOnHalt = lr.IntN(3) == 0 // drawn last: the layers of older plans keep their draws
	genRightAfterPost(lr, p)
	// Drawn after it (issue 50): one panic or Goexit in three becomes a
	// panic raised while a Goexit unwinds, or a Goexit called while a
	// panic unwinds, at every site.
	for s := range nSites {
		for i, a := range l.scripts[s] {
			if (a.kind == aPanic || a.kind == aGoexit) && lr.IntN(3) == 0 {
				l.scripts[s][i].kind = aPanicGoexit + akind(lr.IntN(2))
			}
		}
	}
	// Drawn after them: WithRate in one plan in three, its function
	// playing a script of its own, with every ending.
	if l.rate = lr.IntN(3) == 0; l.rate {
		for range lr.IntN(10) {
			a := genAction(lr, p)
			if (a.kind == aPanic || a.kind == aGoexit) && lr.IntN(2) == 0 {
				a.kind = aPanicGoexit + akind(lr.IntN(2))
			}
			l.scripts[hsRate] = append(l.scripts[hsRate], a)
		}
	}
	// Drawn last (issue 50): WithInterceptor in one plan in three, its
	// function leaving, after next, by one of the endings: its own panic or
	// Goexit, or one raised while fn's panic or Goexit unwinds through it.
	if l.intercept = lr.IntN(3) == 0; l.intercept {
		for range lr.IntN(10) {
			a := action{kind: []akind{aReturn, aReturn, aPanic, aGoexit, aPanicGoexit, aGoexitPanic}[lr.IntN(6)]}
			l.scripts[hsIntercept] = append(l.scripts[hsIntercept], a)
		}
	}
}

// genRightAfterPost adds, after one post in eight of a plan with controls,
// a Pause of its key, or two posts of one Replace tag in a row (issue 50):
// they come while the key's goroutine may still be on its way, and a task
// starts only when that goroutine runs it. Drawn after the rest of the
// layer, so that older plans keep their draws.
func genRightAfterPost(lr randChooser, p *plan) {
	if !p.controls {
		return
	}
	var ops []op
	for _, o := range p.ops {
		ops = append(ops, o)
		if o.kind != opSubmit || !o.post || lr.IntN(8) != 0 {
			continue
		}
		if lr.IntN(2) == 0 {
			ops = append(ops, op{kind: opPause, key: o.key, handle: -1, extra: true})
			continue
		}
		tag := string(rune('a' + lr.IntN(2)))
		for range 2 {
			spec := genSpec(lr, *p, o.key, true)
			ops = append(ops, op{kind: opSubmit, key: o.key, post: true, count: 1, handle: -1, extra: true,
				prio: o.prio, spec: spec, tag: tag, cancelable: spec.b == bBlockCtx})
		}
	}
	p.ops = ops
}

func genAction(lr randChooser, p *plan) action {
	switch x := lr.IntN(20); {
	case x < 8:
		return action{}
	case x < 10:
		return action{kind: aPanic}
	case x < 12:
		return action{kind: aGoexit}
	case x < 14:
		return action{kind: aBlock, gate: lr.IntN(p.gates)}
	}
	a := action{kind: aCall, op: cop(lr.IntN(int(nCops))), tgt: ctarget(lr.IntN(3)), n: lr.IntN(8)}
	if a.op == cCloseAll && lr.IntN(4) != 0 {
		a.op = cStats // Close ends the plan's work: keep it rare
	}
	return a
}

func genLayerOp(lr randChooser, p *plan) op {
	o := op{key: lr.IntN(p.keys), arg: lr.IntN(4), handle: -1, extra: true}
	switch lr.IntN(11) {
	case 0, 1:
		o.kind = opOpen
	case 2, 3:
		o.kind, o.handle = opClose, lr.IntN(4)
		o.canceled = lr.IntN(4) == 0
	case 4, 5:
		o.kind = opDiscard
		if lr.IntN(2) == 0 {
			o.handle = lr.IntN(4)
		}
		o.canceled = lr.IntN(4) == 0
	case 6:
		o.kind = opQueued
		if lr.IntN(16) == 0 {
			o.kind = opCloseAll // rare: it ends the plan's work
		}
	case 7:
		o.kind = opBadHandle
	case 8:
		o.kind, o.arg = opRemove, lr.IntN(2)
	default:
		o.kind, o.post, o.count = opSubmit, true, 1+lr.IntN(3)
		if lr.IntN(2) == 0 {
			o.handle = lr.IntN(4) // through one of key's handles, open or closed
		}
		o.prio = seqsched.Priority(lr.IntN(2))
		o.spec = genSpec(lr, *p, o.key, true)
		o.cancelable = o.spec.b == bBlockCtx || lr.IntN(3) == 0
	}
	return o
}

// injector is the run's state of the layer's scripts.
type injector struct {
	armed atomic.Bool // off once the plan is over
	next  [nSites]atomic.Int32
	ran   [nSites][nAkinds]atomic.Int32 // actions taken, by site and kind
}

// take returns the next action of site's script, counted as taken.
func (r *run) take(s hsite) action {
	l := r.p.layer
	if l == nil || !r.inj.armed.Load() {
		return action{}
	}
	i := int(r.inj.next[s].Add(1)) - 1
	if i >= len(l.scripts[s]) {
		return action{}
	}
	a := l.scripts[s][i]
	r.inj.ran[s][a.kind].Add(1)
	reached[s][a.kind].Add(1)
	return a
}

// reached counts, over every plan of the test binary, the actions taken
// at each site, and the operations callbacks made (see TestModel).
var (
	reached    [nSites][nAkinds]atomic.Int64
	reachedOps [nCops]atomic.Int64
)

// injectedPanic is the value the injector panics with.
type injectedPanic struct{ site hsite }

// callEnv is where a callback runs.
type callEnv struct {
	site hsite
	key  int             // the session the code runs for, -1 when unknown
	ctx  context.Context // the ctx the code was given (fn's, a callback's); nil for the weight function
	rc   *rec            // the running task, in fn
}

// perform runs action a at env's site.
func (r *run) perform(env callEnv, a action) {
	switch a.kind {
	case aPanic:
		v := injectedPanic{site: env.site}
		if env.site == hsFn {
			r.panicking(env.rc, v)
		}
		panic(v)
	case aGoexit:
		runtime.Goexit()
	case aPanicGoexit:
		// Go resumes the Goexit once the panic is recovered; the panic is
		// what the task fails with.
		v := injectedPanic{site: env.site}
		if env.site == hsFn {
			r.panicking(env.rc, v)
		}
		defer func() { panic(v) }()
		runtime.Goexit()
	case aGoexitPanic:
		// The Goexit aborts the panic: recover returns nil, and the task
		// fails with ErrGoexit.
		defer runtime.Goexit()
		panic(injectedPanic{site: env.site})
	case aBlock:
		<-r.gates[a.gate]
	case aCall:
		r.callback(env, a)
	}
}

const (
	// waitBound is the ctx deadline of every callback's wait that must
	// end: waits only go to higher keys, whose work the driver's gates
	// release, so a wait this long is a wait on itself.
	waitBound = 20 * time.Second
	// ownBound is waitBound for a wait on the caller's own key from code a
	// worker runs, given that code's ctx: it must not wait at all
	// (ErrWouldDeadlock, or its work is done already).
	ownBound = 2 * time.Second
	// callBound: a callback that has not returned by then is reported.
	callBound = 30 * time.Second
)

// callback makes the public operation of a at env's site, with the ctx the
// site was given, and holds its result against what may come back.
func (r *run) callback(env callEnv, a action) {
	op := a.op
	if env.ctx == nil && op.waits() || env.key < 0 && op == cAwait {
		op = cStats // see the layer's comment
	}
	own := env.key
	key := max(own, 0)
	if a.tgt == tOther {
		key = (key + 1 + a.n) % r.p.keys
	}
	where := fmt.Sprintf("%v of key %d from %v (key %d)", op, key, env.site, own)
	reachedOps[op].Add(1)
	timer := time.AfterFunc(callBound, func() { r.failf("%s did not return within %v", where, callBound) })
	defer timer.Stop()
	base := env.ctx
	if base == nil {
		base = context.Background()
	}
	var wait context.Context
	var cancel context.CancelFunc
	switch {
	case own < 0 || key < own:
		wait, cancel = context.WithCancel(base)
		cancel() // a wait that cannot wait
	case key == own:
		wait, cancel = context.WithTimeout(base, ownBound)
	default:
		wait, cancel = context.WithTimeout(base, waitBound)
	}
	defer cancel()
	// ErrWouldDeadlock is the answer for a wait on the caller's own
	// session; the logger's Enabled does not know its key.
	selfOK := key == own || own < 0
	if op.waits() {
		switch {
		case env.site == hsFn:
			// The task may lend its slot meanwhile: the trace stops
			// counting it, and counts it again, checking the limit, once
			// the call returned with a slot.
			r.lend(env.rc)
			defer r.reclaim(env.rc)
		case r.p.maxConc == 1:
			defer r.lentWindow(own)()
		}
	}
	switch op {
	case cSubmit, cGo, cPost:
		// From fn, with the task's own ctx: the new task inherits its
		// submit ctx. A callback's ctx must not be kept once it returns:
		// its tasks get an unrelated one.
		req := subReq{ctx: context.Background(), key: key, prio: seqsched.Priority(a.n & 1), spec: taskSpec{b: bOK},
			nested: true, post: op == cPost, goFn: op == cGo, explicit: true}
		if env.site == hsFn {
			req.ctx, req.canceled = env.ctx, env.rc.canceled
		}
		switch {
		case a.n&2 != 0:
			r.mu.Lock()
			req.via = r.pickHandle(key, a.n>>2)
			r.mu.Unlock()
		case a.n>>2 == 1 && a.tgt == tOwn && env.site == hsFn:
			// WaitForRoom in its own session, with its task's ctx: it
			// could never make room, so it is accepted at once or refused
			// with ErrWouldDeadlock, never waits.
			req.wait, req.selfWait = true, true
		}
		r.submit(req)
	case cOpen:
		r.mu.Lock()
		r.openLocked(key, nil)
		r.mu.Unlock()
	case cClose:
		r.mu.Lock()
		hd := r.pickHandle(key, a.n)
		r.mu.Unlock()
		if hd != nil {
			r.end(endClose, key, hd, wait, where, selfOK)
		}
	case cRemove:
		r.end(endRemove, key, nil, wait, where, selfOK)
	case cDiscard:
		r.mu.Lock()
		hd := r.pickHandle(key, a.n)
		r.mu.Unlock()
		if hd != nil && a.n&1 == 1 {
			r.end(endDiscardHandle, key, hd, wait, where, selfOK)
		} else {
			r.end(endDiscard, key, nil, wait, where, selfOK)
		}
	case cQueued:
		r.queued(key)
	case cStats:
		r.stats(where)
	case cAwait:
		r.awaitFrom(key, wait, where, selfOK)
	case cShutdown:
		r.mu.Lock()
		r.closing = true
		r.mu.Unlock()
		// Given the ctx of a task or callback, Shutdown begins and cannot
		// wait.
		if err := r.s.Shutdown(wait); !errors.Is(err, seqsched.ErrWouldDeadlock) {
			r.failf("%s = %v; want ErrWouldDeadlock", where, err)
		}
	case cCloseAll:
		r.closeAll(where)
	}
}

// lentWindow records, under WithMaxConcurrency(1), that code a worker of
// key runs outside fn waits, lending the worker's slot, from now until the
// returned func is called: other keys may run meanwhile, so the fairness
// check leaves waits across it alone. key -1: any key.
func (r *run) lentWindow(key int) func() {
	r.mu.Lock()
	w := &window{key: key, from: r.tick()}
	r.windows = append(r.windows, w)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		w.to = r.tick()
		r.mu.Unlock()
	}
}

type window struct{ key, from, to int }

// awaitFrom awaits the last future of key from a callback, with ctx.
func (r *run) awaitFrom(key int, ctx context.Context, where string, selfOK bool) {
	r.mu.Lock()
	h := r.last[key]
	r.mu.Unlock()
	if h == nil {
		return
	}
	_, err := h.await(ctx)
	switch {
	case errors.Is(err, seqsched.ErrWouldDeadlock):
		if !selfOK {
			r.failf("%s = ErrWouldDeadlock, though it waits for another session", where)
		}
	case isClosed(h.done()): // resolved: its outcome is judged by check
	case errors.Is(err, context.DeadlineExceeded):
		r.failf("%s did not return within its bound: it waits for its own goroutine", where)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
	default:
		r.failf("%s = %v on an unresolved future", where, err)
	}
}

// userCode fails the run if user code runs after a Shutdown returned nil.
func (r *run) userCode(what string) {
	if r.quiet.Load() {
		r.failf("%s ran after Shutdown returned nil", what)
		r.mu.Lock()
		r.late = true
		r.mu.Unlock()
	}
}

// callbackCtx checks the ctx a callback was given: it identifies the
// session's worker, and is never done.
func (r *run) callbackCtx(what string, ctx context.Context) {
	if ctx == nil {
		r.failf("%s was given a nil ctx", what)
		return
	}
	if ctx.Err() != nil || ctx.Done() != nil && isClosed(ctx.Done()) {
		r.failf("%s was given a done ctx (%v)", what, ctx.Err())
	}
}

// notRunning fails the run if a task of key runs while its session's
// worker runs a callback for it. Called with r.mu held.
func (r *run) notRunning(what string, key int) {
	if key >= 0 && key < r.p.keys && r.keyRunning[key] > 0 {
		r.errs = append(r.errs, fmt.Sprintf("%s ran for key %d while a task of the key ran: not on its session's worker", what, key))
	}
}

// handler is the plan's WithErrorHandler function: it counts the call by
// key and class of error, then runs its site's action.
func (r *run) handler(ctx context.Context, key int, err error) {
	r.userCode("the error handler")
	r.callbackCtx("the error handler", ctx)
	r.mu.Lock()
	halt := classOf(err) == clHalt
	if key < 0 || key >= r.p.keys {
		r.errs = append(r.errs, fmt.Sprintf("error handler called with key %d", key))
	} else {
		r.handled[key][classOf(err)]++
		r.notRunning("the error handler", key)
		if halt {
			fail := func(format string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(format, args...)) }
			if c, ok := r.haltClass(key, err, "error handler", fail); ok {
				r.haltsByCall[key][c]++
			}
		}
	}
	r.mu.Unlock()
	if halt {
		r.resumeHalted(key, "the error handler")
	}
	// The scheduler logs how the call ended, whatever code inside it (its
	// action, or code its call back reached) ended it.
	normal := false
	defer func() {
		if normal {
			return
		}
		if v := recover(); v != nil {
			r.handlerExits[aPanic].Add(1)
			panic(v)
		}
		r.handlerExits[aGoexit].Add(1)
	}()
	r.perform(callEnv{site: hsHandler, key: key, ctx: ctx}, r.take(hsHandler))
	normal = true
}

// weight is the plan's WithWeight function. It has no ctx: its call backs
// make no wait.
func (r *run) weight(key int) int {
	r.userCode("the weight function")
	// The call's span: while it lasts, key's worker has no task in hand
	// (invariant 9 holds a Pause made meanwhile to every task).
	r.mu.Lock()
	wc := &weightCall{key: key, enter: r.tick()}
	r.weightCalls = append(r.weightCalls, wc)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		wc.leave = r.tick()
		r.mu.Unlock()
	}()
	normal := false
	defer func() {
		if normal {
			return
		}
		if v := recover(); v != nil {
			r.weightExits[aPanic].Add(1)
			panic(v)
		}
		r.weightExits[aGoexit].Add(1)
	}()
	r.perform(callEnv{site: hsWeight, key: key}, r.take(hsWeight))
	w := r.p.layer.weights[key]
	if w < seqsched.MinWeight || w > seqsched.MaxWeight {
		r.badWeight.Store(true)
	}
	normal = true
	return w
}

// rate is the plan's WithRate function. Like the weight function it has
// no ctx, and its call backs make no wait; it paces no key.
func (r *run) rate(key int) (float64, int) {
	r.userCode("the rate function")
	r.perform(callEnv{site: hsRate, key: key}, r.take(hsRate))
	return 0, 0
}

// intercept is the plan's WithInterceptor function. It calls next with the
// ctx it was given and, if its site's action is an ending, leaves by it
// from a deferred call: after fn returned, or while fn's own panic or
// Goexit unwinds (a panic raised while a Goexit unwinds, a Goexit called
// while a panic unwinds). The task then resolves with the interceptor's
// ending, not with what fn did (see interceptEnd).
func (r *run) intercept(ctx context.Context, _ int, next func(context.Context) error) error {
	r.userCode("the interceptor")
	if a := r.take(hsIntercept); a.kind != aReturn {
		defer r.interceptEnd(ctx, a)
	}
	return next(ctx)
}

// interceptEnd records that the task whose ctx is ctx, whose fn has
// ended, resolves as action a ends it, then performs a: a panic (also one
// raised in a Goexit) is the task's *PanicError whatever fn did, and a
// Goexit (also one called in a panic) is ErrGoexit.
func (r *run) interceptEnd(ctx context.Context, a action) {
	v := injectedPanic{site: hsIntercept}
	r.mu.Lock()
	for rc, c := range r.doneCtx {
		if c != ctx {
			continue
		}
		rc.disturbed = true
		switch a.kind {
		case aPanic, aPanicGoexit:
			rc.exit, rc.panicVal = exitPanic, v
		default:
			rc.exit = exitGoexit
		}
	}
	r.mu.Unlock()
	switch a.kind {
	case aPanic, aPanicGoexit:
		if a.kind == aPanicGoexit {
			defer func() { panic(v) }()
			runtime.Goexit()
		}
		panic(v)
	case aGoexitPanic:
		defer runtime.Goexit()
		panic(v)
	default:
		runtime.Goexit()
	}
}

// weightCall is a call of the weight function, from enter to leave (0:
// it never left). A worker asks for a weight as it begins a turn, before
// it takes the turn's first task: meanwhile it has none in hand.
type weightCall struct {
	key, enter, leave int
}

// modelLog is the plan's slog handler: the tests' funcHandler (whose
// handle is r.logHandle), with an Enabled that plays its site's script.
type modelLog struct {
	funcHandler
	r *run
}

func (h *modelLog) Enabled(ctx context.Context, _ slog.Level) bool {
	r := h.r
	r.userCode("the logger's Enabled")
	r.callbackCtx("the logger's Enabled", ctx)
	normal := false
	defer func() {
		if !normal {
			// A panic or Goexit left Enabled (its own, or one in code its
			// call back reached): the record is dropped.
			r.logDropped.Store(true)
		}
	}()
	if r.ending.Load() {
		// The record may be a halt's, and Enabled does not know its key
		// (nor whether Handle will be reached): resume every key.
		for key := range r.p.keys {
			r.pauseCall(true, key, nil, "the logger's Enabled")
		}
	}
	r.perform(callEnv{site: hsLogEnabled, key: -1, ctx: ctx}, r.take(hsLogEnabled))
	normal = true
	return true
}

func (h *modelLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *modelLog) WithGroup(string) slog.Handler      { return h }

type logRec struct {
	msg   string
	level slog.Level
	key   int
	err   error
}

// logHandle is the plan's slog Handle: it records what it is given before
// its site's action runs.
func (r *run) logHandle(ctx context.Context, rec slog.Record) error {
	r.userCode("the logger's Handle")
	r.callbackCtx("the logger's Handle", ctx)
	lr := logRec{msg: rec.Message, level: rec.Level, key: -1}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "session":
			if a.Value.Kind() == slog.KindInt64 {
				lr.key = int(a.Value.Int64())
			}
		case "error":
			lr.err, _ = a.Value.Any().(error)
		}
		return true
	})
	r.mu.Lock()
	r.logs = append(r.logs, lr)
	r.notRunning(fmt.Sprintf("the logger's Handle (%q)", lr.msg), lr.key)
	r.mu.Unlock()
	if lr.msg == haltMsg {
		r.resumeHalted(lr.key, "the logger's Handle")
	}
	r.perform(callEnv{site: hsLogHandle, key: lr.key, ctx: ctx}, r.take(hsLogHandle))
	return nil
}

// Classes of a posted task's failure, as the error handler and the log
// receive it.
const (
	clFn         = iota // fn's own error (errTask)
	clFnCanceled        // fn returned its ctx's context.Canceled (the log says Error)
	clCanceled          // context.Canceled: the submit ctx ended before it ran (or, to the handler, fn returned it)
	clPanic             // fn panicked
	clGoexit            // ErrGoexit: fn called runtime.Goexit
	clDiscarded         // ErrDiscarded
	clClosed            // ErrClosed
	clReplaced          // ErrReplaced: a newer task of its tag took its place
	clHalt              // a *HaltError: the task halted its session (its cause has a class of its own)
	clOther             // anything else: never
	nClasses
)

var classNames = [...]string{"fn", "fn canceled", "canceled", "panic", "goexit", "discarded", "closed", "replaced",
	"halt", "other"}

// classOf is the class of a failure the error handler is given.
func classOf(err error) int {
	var perr *seqsched.PanicError
	var herr *seqsched.HaltError
	switch {
	case err == nil:
		return clOther
	case errors.As(err, &herr):
		return clHalt
	case errors.As(err, &perr):
		return clPanic
	case errors.Is(err, seqsched.ErrGoexit):
		return clGoexit
	case errors.Is(err, seqsched.ErrDiscarded):
		return clDiscarded
	case errors.Is(err, seqsched.ErrClosed):
		return clClosed
	case errors.Is(err, seqsched.ErrReplaced):
		return clReplaced
	case errors.Is(err, context.Canceled):
		return clCanceled
	case errors.Is(err, errTask):
		return clFn
	}
	return clOther
}

// ranClass is the class of the error fn of a posted task returned.
func ranClass(err error) int {
	if c := classOf(err); c != clCanceled {
		return c
	}
	return clFnCanceled
}

// logClass is the class of a "posted task failed" record of err at level,
// and whether level is the one its origin calls for: Error for fn's own
// error (whatever it wraps), Warn for a forced Shutdown's drop (ErrClosed
// itself), Debug for a task whose submit ctx ended or that Discard
// dropped. A panic or Goexit of fn has a record of its own, not this one.
func logClass(err error, level slog.Level) (int, bool) {
	switch c := classOf(err); c {
	case clFn:
		return c, level == slog.LevelError
	case clCanceled:
		if level == slog.LevelError {
			return clFnCanceled, true
		}
		return c, level == slog.LevelDebug
	case clDiscarded, clReplaced:
		return c, level == slog.LevelDebug
	case clClosed:
		return c, err == seqsched.ErrClosed && level == slog.LevelWarn
	default:
		return clOther, false
	}
}

// wantLevels says, for a failure message, at which levels err may be
// logged.
func wantLevels(err error) string {
	switch classOf(err) {
	case clFn:
		return "ERROR"
	case clCanceled:
		return "ERROR (fn returned it) or DEBUG (its submit ctx ended)"
	case clDiscarded, clReplaced:
		return "DEBUG"
	case clClosed:
		return "WARN, with ErrClosed itself"
	}
	return "no record of this kind"
}

// hnd is a handle the run opened, with what the model knows of it.
// Guarded by r.mu.
type hnd struct {
	h             *seqsched.Session[int]
	key           int
	closeIssued   bool // Close was called on it
	closeReturned bool // and returned: the handle is closed for good
	killed        bool // a Remove or Discard of its key was issued after it was opened
}

// openLocked opens a handle on key. An Open after the key's session began
// to end may make a successor, whose tasks run after the closing
// session's whatever their priority: the key's epoch moves on, and rc (the
// task whose submit opens it, if any) belongs to no known epoch. Called
// with r.mu held.
func (r *run) openLocked(key int, rc *rec) *hnd {
	if r.ended[key] {
		r.epoch[key]++
		if rc != nil {
			rc.epochBefore = -1
		}
	}
	h, err := r.s.Open(key)
	if err != nil {
		if !errors.Is(err, seqsched.ErrClosed) || !r.closing {
			r.errs = append(r.errs, fmt.Sprintf("Open(%d) = %v", key, err))
		}
		return nil
	}
	if h.Key() != key {
		r.errs = append(r.errs, fmt.Sprintf("Open(%d).Key() = %d", key, h.Key()))
	}
	hd := &hnd{h: h, key: key}
	r.handles[key] = append(r.handles[key], hd)
	return hd
}

// pickHandle returns handle n (mod their number) of key, or nil if key
// has none. Called with r.mu held.
func (r *run) pickHandle(key, n int) *hnd {
	hs := r.handles[key]
	if len(hs) == 0 {
		return nil
	}
	return hs[n%len(hs)]
}

// liveHandle reports whether key has a handle the model knows open.
// Called with r.mu held.
func (r *run) liveHandle(key int) bool {
	for _, hd := range r.handles[key] {
		if !hd.closeIssued && !hd.killed {
			return true
		}
	}
	return false
}

type endKind uint8

const (
	endRemove endKind = iota
	endDiscard
	endClose
	endDiscardHandle
)

var endNames = [...]string{"Remove", "Discard", "Close", "Discard(handle)"}

// endEv is a call that ends a session (or may: a Close), with the ticks
// at which it was issued and returned (0: it did not return).
type endEv struct {
	kind       endKind
	key        int
	issue, ret int
	ok         bool // it returned nil
}

// end calls Remove or Discard of key, or Close or Discard of hd, with ctx,
// and holds the result against what may come back: nil; ErrWouldDeadlock
// when selfOK (called back on the caller's own session); ErrClosed once a
// Shutdown gave up; a SessionError for Discard through a closed handle;
// ctx's error once ctx ended (never the deadline of a bound). When Remove
// or Discard by key returns nil, every task of key accepted before the
// call has resolved, none with ErrClosed, every posted one that started
// has ended, and the failures of posted ones have been reported.
func (r *run) end(kind endKind, key int, hd *hnd, ctx context.Context, where string, selfOK bool) error {
	r.mu.Lock()
	wasEnded := r.ended[key]
	switch kind {
	case endClose:
		hd.closeIssued = true
		if !r.liveHandle(key) {
			r.ended[key] = true // maybe its last handle: the session drains
		}
	default:
		r.ended[key] = true
		for _, x := range r.handles[key] {
			x.killed = true
		}
		if kind != endRemove {
			r.discarded[key] = true
		}
	}
	closedBefore := hd != nil && hd.closeIssued && kind == endDiscardHandle
	ev := &endEv{kind: kind, key: key, issue: r.tick()}
	r.ends = append(r.ends, ev)
	r.mu.Unlock()

	var err error
	switch kind {
	case endRemove:
		err = r.s.Remove(ctx, key)
	case endDiscard:
		err = r.s.Discard(ctx, key)
	case endClose:
		err = hd.h.Close(ctx)
	case endDiscardHandle:
		err = hd.h.Discard(ctx)
	}
	ctxErr := ctx.Err()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		// Returned nil: the session it ended (if any) is gone. Any other
		// return leaves it ending for an unknown time (ret 0).
		ev.ret, ev.ok = r.tick(), true
	}
	fail := func(format string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(format, args...)) }
	var se *seqsched.SessionError
	switch {
	case err == nil:
	case errors.Is(err, seqsched.ErrWouldDeadlock):
		if !selfOK {
			fail("%s: %v(%d) = ErrWouldDeadlock, though it waits for another session", where, endNames[kind], key)
		}
	case errors.Is(err, seqsched.ErrClosed) && r.forced:
	case errors.As(err, &se) && errors.Is(err, seqsched.ErrSessionClosing) && kind == endDiscardHandle &&
		(closedBefore || wasEnded || hd.killed):
		if se.Key != key {
			fail("%s: %v(%d) = %v: the error names key %v", where, endNames[kind], key, err, se.Key)
		}
	case errors.Is(err, context.DeadlineExceeded):
		fail("%s: %v(%d) did not return within its bound: it waits for its own goroutine", where, endNames[kind], key)
	case ctxErr != nil && errors.Is(err, ctxErr):
	default:
		fail("%s: %v(%d) = %v", where, endNames[kind], key, err)
	}
	if kind == endClose {
		hd.closeReturned = true
	}
	if err != nil || (kind != endRemove && kind != endDiscard) {
		return err
	}
	mustReport := 0 // posted tasks of key accepted before the call whose failure is reported
	for _, rc := range r.recs {
		if rc.key != key || !rc.accepted || rc.submitted == 0 || rc.submitted > ev.issue {
			continue
		}
		if rc.posted {
			switch {
			case rc.starts > 0 && rc.end == 0:
				fail("%s: %v(%d) returned nil while posted task %d still ran", where, endNames[kind], key, rc.id)
			case rc.starts == 0:
				mustReport++
			case r.p.layer != nil && r.p.layer.handler && (rc.exit != exitReturn || rc.retErr != nil):
				mustReport++
			case rc.exit == exitReturn && rc.retErr != nil:
				mustReport++ // without a handler, a panic or Goexit has a record of its own
			}
			continue
		}
		if !isClosed(rc.h.done()) {
			fail("%s: %v(%d) returned nil before task %d (accepted before it) resolved", where, endNames[kind], key, rc.id)
			continue
		}
		if _, err := rc.h.await(context.Background()); errors.Is(err, seqsched.ErrClosed) {
			fail("%s: %v(%d) (issued at %d, returned nil at %d) returned nil though task %d, accepted before it (at %d), was dropped by a forced Shutdown (at %d)",
				where, endNames[kind], key, ev.issue, ev.ret, rc.id, rc.submitted, r.forcedAt)
		}
	}
	if l := r.p.layer; l != nil {
		reported, what := 0, "error handler calls"
		if l.handler {
			for _, n := range r.handled[key] {
				reported += n
			}
		} else {
			what = "\"posted task failed\" records"
			for _, lr := range r.logs {
				if lr.key == key && (lr.msg == "seqsched: posted task failed" || lr.msg == haltMsg) {
					reported++
				}
			}
		}
		if reported < mustReport && (l.handler || !r.logDropped.Load()) {
			fail("%s: %v(%d) returned nil with %d %s for the key; %d posted tasks accepted before it failed",
				where, endNames[kind], key, reported, what, mustReport)
		}
	}
	return nil
}

// queued checks Queued by key and through each of key's handles.
func (r *run) queued(key int) {
	if hi, no := r.s.Queued(key); hi < 0 || no < 0 {
		r.failf("Queued(%d) = %d, %d", key, hi, no)
	}
	r.mu.Lock()
	hs := slices.Clone(r.handles[key])
	closed := make([]bool, len(hs))
	for i, hd := range hs {
		closed[i] = hd.closeReturned
	}
	r.mu.Unlock()
	for i, hd := range hs {
		hi, no := hd.h.Queued()
		switch {
		case hi < 0 || no < 0:
			r.failf("handle Queued of key %d = %d, %d", key, hi, no)
		case closed[i] && (hi != 0 || no != 0):
			r.failf("Queued through a closed handle of key %d = %d, %d; want 0, 0", key, hi, no)
		}
		if hd.h.Key() != key {
			r.failf("handle of key %d: Key() = %d", key, hd.h.Key())
		}
	}
}

// stats checks a Stats snapshot for sanity.
func (r *run) stats(where string) {
	st := r.s.Stats()
	if st.Completed > st.Submitted || st.Skipped > st.Completed || st.Sessions < 0 || st.Running < 0 || st.Queued < 0 {
		r.failf("%s: inconsistent Stats %+v", where, st)
	}
}

// badHandles checks that a nil and a zero *Session answer ErrNotNew from
// every method, and never panic (issue 25, item 10).
func (r *run) badHandles() {
	var zero seqsched.Session[int]
	var none *seqsched.Session[int]
	for _, h := range []*seqsched.Session[int]{&zero, none} {
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.failf("a nil or zero *Session panicked: %v", v)
				}
			}()
			if hi, no := h.Queued(); hi != 0 || no != 0 || h.Key() != 0 {
				r.failf("a nil or zero *Session: Queued %d, %d, Key %d", hi, no, h.Key())
			}
			fn := func(context.Context) error { return nil }
			_, errGo := h.Go(context.Background(), fn)
			_, errSubmit := seqsched.SubmitTo(context.Background(), h, func(context.Context) (int, error) { return 0, nil })
			for name, err := range map[string]error{
				"Close": h.Close(context.Background()), "Discard": h.Discard(context.Background()),
				"Post": h.Post(context.Background(), fn), "Go": errGo, "SubmitTo": errSubmit} {
				if !errors.Is(err, seqsched.ErrNotNew) {
					r.failf("a nil or zero *Session: %s = %v; want ErrNotNew", name, err)
				}
			}
		}()
	}
}
