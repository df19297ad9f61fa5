package seqsched_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"go.uber.org/goleak"
)

// The model-based test: a generator turns bytes into a plan (scheduler
// options and a sequence of operations), a driver runs the plan against a
// real Scheduler while every task records when it starts and ends, and a
// checker holds the trace and the futures against the invariants listed in
// README.md's guarantees:
//
//  1. every accepted task resolves its future exactly once (ran once, or was
//     skipped with its ctx's error, ErrDiscarded or ErrClosed), with what
//     its fn did (returned, panicked, called runtime.Goexit); a rejected
//     Submit leaves no trace and names a reason that holds;
//  2. per session: no overlap, FIFO within a priority, High before Normal at
//     every pick;
//  3. with WithMaxConcurrency(n): never more than n tasks running, and a
//     session with work waits at most one turn (yieldAfter tasks, times
//     its weight) of each other ready session;
//  4. once Shutdown has returned nil, no goroutine the scheduler started
//     remains, it holds no live token, and no user code runs;
//  5. every task's ctx keeps the context contract, while it runs and after;
//  6. Stats are exact once the scheduler is quiet: submitted, completed,
//     and each task's outcome (Succeeded, Failed, Panicked, Skipped,
//     Discarded) by priority;
//  7. Remove or Discard of a key that returns nil has resolved every task
//     of the key accepted before it (none dropped with ErrClosed); nothing
//     queued behind a task that Discard dropped runs, and nothing accepted
//     before a Discard starts after it returned;
//  8. the error handler is called exactly once per failed posted task (by
//     key and class of error), whatever it does, on its session's worker
//     (never while a task of its key runs), and a Remove or Discard that
//     returns nil has reported the failures of the key's posted tasks
//     accepted before it; without a handler, the log gets one record per
//     failure, at the level its origin calls for (Error for fn's own
//     error, Warn for a forced Shutdown's drop, Debug for a task whose
//     submit ctx ended or that Discard dropped).
//
// Plans decoded with per-key control (issue 37) also pause and resume
// keys, halt them, replace tasks and wait for room; model_control_test.go
// adds invariants 9-14 for them.
//
// Most plans carry a hostile layer (model_inject_test.go): posted tasks,
// counted handles, Discard, Close, an error handler, a logger, a weight
// and a rate function and an interceptor, and at every call site of user
// code (fn, the error handler, the logger's handler, the weight and rate
// functions, the interceptor) an injector that returns, panics, calls
// runtime.Goexit, panics while a Goexit unwinds, calls Goexit while a
// panic unwinds, blocks (until a gate the driver releases) or calls back
// into the scheduler with the ctx it was given (the interceptor only
// returns or leaves by one of the four endings). Every ctx
// is well behaved: re-entry is known by ctx alone, so code a worker runs
// passes its own ctx (or one derived from it) when it re-enters.
//
// TestModel feeds the generator bytes drawn from seeded PCGs; FuzzModel lets
// the fuzzer choose them. A seed replays the same plan exactly; the
// interleaving of goroutines is the Go scheduler's and varies from run to run.

var (
	modelSeed = flag.Uint64("seed", 0,
		"TestModel: first seed (0: a random one, logged); with -sequences=1 it replays one plan")
	modelSequences = flag.Int("sequences", 0,
		"TestModel: plans to run (0: 3000, or 300 with -short)")
	modelPlain = flag.Bool("plain", false,
		"TestModel: run the plans without their hostile layer (as regression seeds run)")
	modelMaxFailed = flag.Int("maxfailed", 10,
		"TestModel: stop after this many failing plans (a hang costs its bound); 0: never")
)

// awaitUnderLimit lets tasks await other sessions' futures under
// WithMaxConcurrency: such an Await lends the task's slot while it waits
// (blocking-aware slots), so the trace stops counting the task as running
// until Await returns with a slot again.
const awaitUnderLimit = true

// regressionSeeds are plans that once found a bug; they run on every
// TestModel. Keep each with a note of what it found.
var regressionSeeds = []uint64{
	8328051232424530736, // Goexit restarted the turn count (TestGoexitDoesNotLengthenTurn)
	7292425649633479293, // a session with accepted work was queued late (rare interleaving)
	7292425649633471846, // data race on a yielding session's key (rare interleaving, -race)
	7292425649633500687, // the same race
	2281273544330182018, // the limit check at a start counted a task back from Await after a forced Shutdown (rare interleaving; a test bug)
	8002383593656988321, // a successor (Open of a closing key) started a new turn: the key ran past yieldAfter
	4363303553723065770, // a task awaited its own key's successor: a deadlock the guard missed
	4363303553723065933, // a successor waited behind a whole turn of another key while its key's turn went on
}

// controlRegressionSeeds are plans with per-key control (issue 37) that
// once found a bug; they run with their hostile layer.
var controlRegressionSeeds = []uint64{}

// hostileRegressionSeeds are plans that once found a bug with their hostile
// layer. That layer was redrawn when the core's contract changed (no
// hostile ctxs, callbacks given a ctx), so each runs as a plain plan (its
// base plan is unchanged) and with today's layer.
var hostileRegressionSeeds = []uint64{
	5375953322606196093, // a log record named the session of a Post reported earlier on the same worker (TestLogAfterAReportedPostNamesItsOwnSession)
	6586365029773385313, // (today's layer) a WithWeight function that called Goexit twice was logged twice, not once per scheduler
}

func TestModel(t *testing.T) {
	n := *modelSequences
	if n == 0 {
		n = 3000
		if testing.Short() {
			n = 300
		}
	}
	base := *modelSeed
	if base == 0 {
		base = rand.Uint64() >> 1
		t.Logf("first seed %d (replay a failing plan with -run 'TestModel$' -seed=N -sequences=1)", base)
	}
	type planSeed struct {
		seed     uint64
		plain    bool
		recorded bool // decoded as it was recorded, without per-key control
	}
	var seeds []planSeed
	for _, seed := range regressionSeeds {
		seeds = append(seeds, planSeed{seed, true, true}) // the plans they were recorded with
	}
	for _, seed := range hostileRegressionSeeds {
		seeds = append(seeds, planSeed{seed, true, true}, planSeed{seed, false, true})
	}
	for _, seed := range controlRegressionSeeds {
		seeds = append(seeds, planSeed{seed, false, false})
	}
	for i := range uint64(n) {
		seeds = append(seeds, planSeed{base + i, *modelPlain, false})
	}
	// One subtest per plan, so that a data race the race detector reports
	// is pinned to its seed too. A hang costs its bound: past -maxfailed
	// failing plans, the rest are not run.
	failed := 0
	for _, ps := range seeds {
		if *modelMaxFailed > 0 && failed >= *modelMaxFailed {
			t.Fatalf("stopped after %d failing plans", failed)
		}
		name, flags := fmt.Sprint(ps.seed), ""
		if ps.plain {
			name, flags = name+"-plain", " -plain"
		}
		if ps.recorded {
			name += "-recorded"
		}
		t.Run(name, func(t *testing.T) {
			p := genPlan(seedBytes(ps.seed))
			if ps.recorded {
				p = genRecordedPlan(seedBytes(ps.seed))
			}
			if ps.plain {
				p = p.plain()
			}
			if msgs := runModel(p); len(msgs) > 0 {
				failed++
				t.Fatalf("invariants violated (replay: go test -race -run 'TestModel$' -seed=%d -sequences=1%s .):\n%s\nplan:\n%s",
					ps.seed, flags, strings.Join(msgs, "\n"), p)
			}
		})
	}
	t.Logf("actions taken by site: %s", reachReport())
	t.Logf("per-key control: %s", controlReport())
}

// reachReport lists how often each action ran at each call site, and each
// operation callbacks made, over every plan run so far.
func reachReport() string {
	var b strings.Builder
	for s := range nSites {
		fmt.Fprintf(&b, "\n  %-12v", hsite(s))
		for k := range nAkinds {
			fmt.Fprintf(&b, " %v=%d", akindNames[k], reached[s][k].Load())
		}
	}
	b.WriteString("\n  callbacks:  ")
	for op := range nCops {
		fmt.Fprintf(&b, " %v=%d", cop(op), reachedOps[op].Load())
	}
	return b.String()
}

func FuzzModel(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seedBytes(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := genPlan(data)
		if msgs := runModel(p); len(msgs) > 0 {
			t.Fatalf("invariants violated:\n%s\nplan:\n%s", strings.Join(msgs, "\n"), p)
		}
	})
}

// source hands out the generator's choices from a byte string; when the
// bytes run out every choice is 0, which ends the plan.
type source struct {
	b    []byte
	i    int
	last int // the byte of the last draw, 0 if it read none
}

func (s *source) intn(n int) int {
	if s.i >= len(s.b) || n <= 1 {
		s.last = 0
		return 0
	}
	v := int(s.b[s.i])
	s.i++
	s.last = v
	return v % n
}

// rest returns what the last draw, of range n, left of its byte unused
// (the byte divided by n). Plans decoded before per-key control existed
// never read it, so choices drawn from it leave their shape unchanged.
func (s *source) rest(n int) int { return s.last / n }

func (s *source) more() bool { return s.i < len(s.b) }

type behaviour uint8

const (
	bOK       behaviour = iota // return id, nil
	bErr                       // return id, errTask
	bPanic                     // panic with arg's kind of value
	bGoexit                    // runtime.Goexit
	bGosched                   // call runtime.Gosched arg times, then return id, nil
	bGate                      // wait for gate arg (ignoring ctx), then return id, nil
	bBlockCtx                  // wait for ctx.Done, return ctx.Err()
	bSubmit                    // submit nested to key arg, return id, nil
	bAwait                     // await the last future submitted to key arg, return id, nil
	nBehaviours
	// Drawn from the values that used to mean bOK, so that the plans of
	// older seeds changed as little as possible.
	bSelfAwait  = nBehaviours     // submit to its own key and await that: ErrWouldDeadlock
	bSelfRemove = nBehaviours + 1 // Remove its own key: ErrWouldDeadlock, and the key drains
	// await the last futures of keys arg and arg+1 on two goroutines, the
	// second after 0-3 yields of the processor (the task's id mod 4): the
	// Awaits overlap or follow each other, and one may begin while the
	// other waits to take the slot back
	bFanAwait = nBehaviours + 2
)

var behaviourNames = [...]string{"ok", "err", "panic", "goexit", "gosched", "gate", "blockctx", "submit", "await",
	"selfawait", "selfremove", "fanawait"}

func (b behaviour) String() string { return behaviourNames[b] }

type taskSpec struct {
	b      behaviour
	arg    int
	prio   seqsched.Priority // of the nested task
	nested *taskSpec
}

func (ts taskSpec) String() string {
	s := fmt.Sprintf("%v(%d)", ts.b, ts.arg)
	if ts.nested != nil {
		s += fmt.Sprintf("{%v %v}", ts.prio, *ts.nested)
	}
	return s
}

type opKind uint8

const (
	opSubmit   opKind = iota // submit count tasks of spec to key
	opCancel                 // cancel the submit ctx number arg
	opRelease                // close gate arg
	opRemove                 // Remove(key) on a goroutine; arg 1: with a canceled ctx
	opStats                  // Stats, checked for sanity
	opAwait                  // Await the last future of key with a canceled ctx
	opShutdown               // arg 0: graceful, on a goroutine; 1: canceled ctx; 2: past deadline
	nOps
	// The hostile layer's own operations (genLayerOp); the base generator
	// never draws them.
	opOpen      // Open(key): one more counted handle
	opClose     // Close handle number handle of key, on a goroutine
	opDiscard   // Discard key, or through handle number handle (>= 0), on a goroutine
	opQueued    // Queued by key and through each of key's handles
	opBadHandle // every method of a nil and a zero *Session
	opCloseAll  // Scheduler.Close: give up at once
	// Per-key control (issue 37), drawn by plans with controls from what
	// was opStats: Pause or Resume of key, by key (handle -1) or through
	// handle number handle of key.
	opPause
	opResume
)

type op struct {
	kind       opKind
	key        int
	arg        int
	count      int
	prio       seqsched.Priority
	cancelable bool
	spec       taskSpec
	// Set by the hostile layer only.
	post     bool // opSubmit: Post instead of Submit or Go
	canceled bool // opClose, opDiscard: with a canceled ctx
	handle   int  // opClose, opDiscard, opPause, opResume, the layer's opSubmit: which of key's handles (-1: by key)
	extra    bool // the op is the layer's own
	// Task options of an opSubmit (plans with controls only).
	halt bool   // HaltOnError
	wait bool   // WaitForRoom: submitted on a goroutine of the driver's
	tag  string // Replace(tag), or ""
}

// opts returns the task options of submit op o, its priority first.
func (o op) opts() []seqsched.TaskOption {
	opts := []seqsched.TaskOption{o.prio}
	if o.halt {
		opts = append(opts, seqsched.HaltOnError)
	}
	if o.wait {
		opts = append(opts, seqsched.WaitForRoom)
	}
	if o.tag != "" {
		opts = append(opts, seqsched.Replace(o.tag))
	}
	return opts
}

// controlNote describes submit op o's options other than its priority.
func (o op) controlNote() string {
	var s string
	if o.halt {
		s += " HaltOnError"
	}
	if o.wait {
		s += " WaitForRoom"
	}
	if o.tag != "" {
		s += fmt.Sprintf(" Replace(%q)", o.tag)
	}
	return s
}

func (o op) String() string {
	var s string
	switch o.kind {
	case opSubmit:
		s = fmt.Sprintf("submit key=%d %v x%d %v cancelable=%v", o.key, o.prio, o.count, o.spec, o.cancelable)
		if o.post {
			s = "post" + s[len("submit"):]
		}
		if o.extra && o.handle >= 0 {
			s += fmt.Sprintf(" through handle %d", o.handle)
		}
		return s + o.controlNote()
	case opCancel:
		return fmt.Sprintf("cancel ctx #%d", o.arg)
	case opRelease:
		return fmt.Sprintf("release gate %d", o.arg)
	case opRemove:
		return fmt.Sprintf("remove key=%d canceled=%v", o.key, o.arg == 1)
	case opStats:
		return "stats"
	case opAwait:
		return fmt.Sprintf("await last future of key=%d with a canceled ctx", o.key)
	case opShutdown:
		return fmt.Sprintf("shutdown mode=%d", o.arg)
	case opOpen:
		return fmt.Sprintf("open key=%d", o.key)
	case opClose:
		return fmt.Sprintf("close handle %d of key=%d canceled=%v", o.handle, o.key, o.canceled)
	case opDiscard:
		if o.handle >= 0 {
			return fmt.Sprintf("discard through handle %d of key=%d canceled=%v", o.handle, o.key, o.canceled)
		}
		return fmt.Sprintf("discard key=%d canceled=%v", o.key, o.canceled)
	case opQueued:
		return fmt.Sprintf("queued key=%d", o.key)
	case opBadHandle:
		return "nil and zero *Session"
	case opCloseAll:
		return "Scheduler.Close"
	case opPause, opResume:
		s = "pause"
		if o.kind == opResume {
			s = "resume"
		}
		if o.handle >= 0 {
			return fmt.Sprintf("%s through handle %d of key=%d", s, o.handle, o.key)
		}
		return fmt.Sprintf("%s key=%d", s, o.key)
	}
	return "?"
}

type plan struct {
	maxConc, yieldAfter, maxQueue, keys, gates int
	ops                                        []op
	layer                                      *layer // nil: a plain plan
	// controls: the plan was decoded with per-key control (issue 37):
	// Pause and Resume ops, task options, and the options below.
	controls  bool
	highBurst int  // WithHighBurst(n), 0: none
	haltAll   bool // WithHaltOnError()
}

func (p plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "WithMaxConcurrency(%d) WithYieldAfter(%d) WithMaxQueue(%d) keys=%d gates=%d%s",
		p.maxConc, p.yieldAfter, p.maxQueue, p.keys, p.gates, p.shardsNote())
	if p.highBurst > 0 {
		fmt.Fprintf(&b, " WithHighBurst(%d)", p.highBurst)
	}
	if p.haltAll {
		b.WriteString(" WithHaltOnError()")
	}
	if !p.controls {
		b.WriteString(" (decoded as recorded: no per-key control)")
	}
	b.WriteString("\n")
	if p.layer != nil {
		b.WriteString(p.layer.String())
	}
	for i, o := range p.ops {
		fmt.Fprintf(&b, "%3d %v\n", i, o)
	}
	return b.String()
}

// plain returns p without its hostile layer: the plan the base generator
// made.
func (p plan) plain() plan {
	if p.layer == nil {
		return p
	}
	q := p
	q.layer, q.ops = nil, nil
	for _, o := range p.ops {
		if !o.extra {
			o.post = false
			q.ops = append(q.ops, o)
		}
	}
	return q
}

// oneShard reports whether the plan runs with every key on one shard (see
// runModel).
func (p plan) oneShard() bool { return p.gates%2 == 0 }

func (p plan) shardsNote() string {
	if p.oneShard() {
		return " WithShards(1)"
	}
	return ""
}

const maxPlanBytes = 1024 // the fuzzer grows inputs; longer plans add time, not coverage

// genPlan turns bytes into a plan. Every byte string is a valid plan.
func genPlan(data []byte) plan { return decodePlan(data, true) }

// genRecordedPlan decodes data as plans were decoded before per-key
// control existed: the plans regression seeds were recorded with.
func genRecordedPlan(data []byte) plan { return decodePlan(data, false) }

// decodePlan turns bytes into a plan; with controls, it also reads the
// parts of bytes that older plans left unused (see source.rest): the high
// nibble of an op's kind byte gives a submit its task options and turns
// three in four Stats ops into Pause or Resume ops, and the header's
// spare bits choose WithHighBurst and WithHaltOnError. Every other choice,
// and so the shape of every recorded plan, stays what it was.
func decodePlan(data []byte, controls bool) plan {
	if len(data) > maxPlanBytes {
		data = data[:maxPlanBytes]
	}
	src := &source{b: data}
	p := plan{
		maxConc:    []int{0, 0, 1, 2, 3}[src.intn(5)],
		yieldAfter: seqsched.MinYieldAfter + src.intn(3),
		controls:   controls,
	}
	if controls {
		p.highBurst = []int{0, 0, 1, 2}[src.rest(3)%4]
	}
	p.maxQueue = []int{0, 0, 0, 3, 12}[src.intn(5)]
	p.keys = 2 + src.intn(5)
	if controls {
		p.haltAll = src.rest(5)%8 == 0
	}
	p.gates = 1 + src.intn(4)
	cancels := 0
	for src.more() {
		o := op{kind: opKind(src.intn(16))}
		hi := src.rest(16)
		if o.kind >= nOps { // mostly submits
			o.kind = opSubmit
		}
		o.key = src.intn(p.keys)
		switch o.kind {
		case opSubmit:
			o.prio = seqsched.Priority(src.intn(2))
			o.count = 1
			if src.intn(4) == 0 {
				o.count = 1 + src.intn(3*p.yieldAfter) // a burst: turns end, sessions yield
			}
			o.spec = genSpec(src, p, o.key, true)
			o.cancelable = o.spec.b == bBlockCtx || src.intn(3) == 0
			if o.cancelable {
				cancels += o.count
			}
			if controls {
				// One submit in eight halts its key if it fails; one in
				// four waits for room, one in four replaces (two tags).
				o.halt = hi&7 == 7
				switch hi >> 2 {
				case 2:
					o.wait = true
				case 3:
					o.tag = string(rune('a' + hi&1))
				}
			}
		case opCancel:
			if cancels == 0 {
				continue
			}
			o.arg = src.intn(cancels)
		case opRelease:
			o.arg = src.intn(p.gates)
		case opRemove:
			o.arg = src.intn(2)
		case opStats:
			if !controls {
				break
			}
			// Resumes outnumber pauses, so that keys are not paused for
			// most of a plan.
			o.handle = -1
			switch {
			case hi < 4: // stats
			case hi < 7:
				o.kind = opPause
			case hi == 7:
				o.kind, o.handle = opPause, hi
			case hi < 14:
				o.kind = opResume
			default:
				o.kind, o.handle = opResume, hi
			}
		case opShutdown:
			if src.intn(4) != 0 { // shutdowns end plans: keep most plans running longer
				continue
			}
			o.arg = src.intn(3)
		}
		p.ops = append(p.ops, o)
	}
	genLayer(data, &p)
	return p
}

// chooser hands out a generator's choices: a source of bytes, or the
// hostile layer's PCG.
type chooser interface{ intn(n int) int }

func genSpec(src chooser, p plan, key int, outer bool) taskSpec {
	ts := taskSpec{b: behaviour(src.intn(int(nBehaviours) + 4))}
	if ts.b > bFanAwait || (!outer && ts.b >= nBehaviours) {
		ts.b = bOK
	}
	switch ts.b {
	case bPanic:
		ts.arg = src.intn(4)
	case bGosched:
		ts.arg = 1 + src.intn(4)
	case bGate:
		ts.arg = src.intn(p.gates)
	case bSubmit:
		if !outer { // nested tasks are leaves
			ts.b = bOK
			break
		}
		ts.arg = src.intn(p.keys)
		ts.prio = seqsched.Priority(src.intn(2))
		nested := genSpec(src, p, ts.arg, false)
		ts.nested = &nested
	case bAwait:
		// Awaits point to higher keys only, so waits cannot form a cycle.
		if !outer || key+1 >= p.keys || (p.maxConc > 0 && !awaitUnderLimit) {
			ts.b = bOK
			break
		}
		ts.arg = key + 1 + src.intn(p.keys-key-1)
	case bFanAwait:
		// No draw: plans of older seeds, where this value meant bOK, keep
		// their shape. Awaits point to higher keys only, as for bAwait.
		if key+2 >= p.keys || (p.maxConc > 0 && !awaitUnderLimit) {
			ts.b = bOK
			break
		}
		ts.arg = key + 1
	}
	if !outer && (ts.b == bGate || ts.b == bBlockCtx) {
		ts.b = bGosched // nested tasks run to completion on their own
		ts.arg = 1
	}
	return ts
}

var errTask = errors.New("task failed")

type panicValue struct{ id int }

func panicWith(kind, id int) any {
	switch kind {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("task %d: %w", id, errTask)
	case 2:
		return panicValue{id}
	}
	return fmt.Sprintf("task %d", id)
}

// rec is what the trace knows about one task. Sequence numbers order every
// event of a run; 0 means "did not happen".
type rec struct {
	id, key                 int
	prio                    seqsched.Priority
	spec                    taskSpec
	nested                  bool // submitted by a task or a callback
	posted                  bool // by Post: no future
	submitBefore, submitted int  // before Submit was called, after it returned
	// The key's epoch before Submit was called and after it returned: an
	// Open after the key's session began to end may make a successor
	// session, whose tasks run after the closing one's whatever their
	// priority, so order is checked among tasks of one known epoch only.
	epochBefore, epochAfter int
	start, end              int
	starts                  int
	accepted                bool
	h                       *handle // the future of an accepted Submit or Go
	rejected                error
	canceled                func() bool // whether its submit ctx was canceled
	probe                   any         // the ctxProbeKey value its ctx carries
	// What its fn did, recorded on the way out of fn: the scheduler must
	// resolve the task with that.
	exit     exitKind
	retV     int
	retErr   error
	panicVal any
	// disturbed: injected code ran on its fn's goroutine, so what fn did
	// may differ from its spec.
	disturbed bool
	// Per-key control: its task options (halt also under WithHaltOnError).
	halt bool
	wait bool
	tag  string
	// inLine: a WaitForRoom caller was known to wait in its lane's line,
	// or to be accepted, by this tick (0: not known before submitted).
	inLine int
	// placeFrom and placeTo bound when the task's place in its lane was
	// fixed, when that is not between submitBefore and submitted (or
	// inLine): a replacement holds the place of the first task it (and
	// those it replaced) took the place of. noOrder: its place is unknown,
	// and it is left out of the order checks.
	placeFrom, placeTo int
	noOrder            bool
}

// from and to bound when rc's place in its lane's FIFO was fixed: a task
// whose place was fixed before another was submitted runs before it.
func (rc *rec) from() int {
	if rc.placeFrom != 0 {
		return rc.placeFrom
	}
	return rc.submitBefore
}

func (rc *rec) to() int {
	switch {
	case rc.placeTo != 0:
		return rc.placeTo
	case rc.inLine != 0:
		return rc.inLine
	}
	return rc.submitted
}

// halted reports whether rc, run with HaltOnError, failed: it halted its
// session.
func (rc *rec) halted() bool {
	return rc.halt && rc.accepted && rc.starts > 0 && (rc.exit != exitReturn || rc.retErr != nil)
}

// causeClass is the class of the error rc's fn failed with, as a
// HaltError carries it.
func (rc *rec) causeClass() int {
	switch rc.exit {
	case exitPanic:
		return clPanic
	case exitGoexit:
		return clGoexit
	}
	return classOf(rc.retErr)
}

type exitKind uint8

const (
	exitNone exitKind = iota
	exitReturn
	exitPanic
	exitGoexit
)

// run is one plan being executed.
type run struct {
	p           plan
	s           *seqsched.Scheduler[int]
	inj         injector
	gates       []chan struct{}
	quiet       atomic.Bool           // a Shutdown returned nil: no user code may run from now on
	quietAt     int                   // the tick when quiet was first set
	late        bool                  // something ran after quiet: the failure shows the trace
	badWeight   atomic.Bool           // the weight function returned a weight out of range
	logDropped  atomic.Bool           // a panic or Goexit left the logger's Enabled: a record was dropped
	weightExits [nAkinds]atomic.Int32 // the weight function's calls that ended in a panic or a Goexit
	// handlerExits counts the error handler's calls that ended in a panic
	// or a Goexit, whatever code inside them caused it.
	handlerExits [nAkinds]atomic.Int32

	mu          sync.Mutex // guards everything below
	weightCalls []*weightCall
	errs        []string
	seq         int
	recs        []*rec
	keyRunning  []int
	running     int
	// active holds the tasks counted in running; true marks one that came
	// back from an Await after a forced Shutdown, which may hold a slot
	// beyond the limit.
	active    map[*rec]bool
	ended     []bool // a Remove, a Discard or a Close (maybe of the last handle) of the key was issued
	discarded []bool // a Discard of the key was issued
	epoch     []int  // Opens after the key's session began to end
	closing   bool   // Shutdown was called
	forced    bool   // a Shutdown returned an error: unstarted tasks may get ErrClosed
	forcedAt  int    // the tick when forced was first set
	last      []*handle
	ctxs      []*rec       // tasks whose ctx is checked once the plan is over (ctx in doneCtx)
	opened    map[int]*hnd // the handle one task in four goes through
	handles   [][]*hnd     // every handle opened, by key
	doneCtx   map[*rec]context.Context
	ends      []*endEv
	windows   []*window
	handled   [][nClasses]int // error handler calls, by key and class of error
	logs      []logRec
	// Per-key control.
	pauses      []*pauseEv      // Pause and Resume calls, in order of issue
	haltsByCall [][nClasses]int // halts the error handler was told of, by key and class of cause
	ending      atomic.Bool     // the plan is over: a halt reported from now on is resumed (see endPlan)
}

// pauseEv is a call of Pause or Resume, by key or through a handle, with
// the ticks at which it was issued and returned.
type pauseEv struct {
	resume     bool
	key        int
	handle     bool // through a handle
	clean      bool // by key, or through a handle open on the key's session: Pause paused the key
	issue, ret int
	ok         bool // returned nil
	where      string
}

// handle is an accepted task's future, whichever of Submit and Go made it.
type handle struct {
	done  func() <-chan struct{}
	await func(context.Context) (int, error) // a Go future answers -1 as its value
	viaGo bool
}

func (r *run) failf(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *run) tick() int { r.seq++; return r.seq }

// runModel runs plan p and returns the violations found.
// goQuiet records that a Shutdown returned nil.
func (r *run) goQuiet() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.quiet.Load() {
		r.quietAt = r.tick()
		var running []int
		for rc := range r.active {
			running = append(running, rc.id)
		}
		if len(running) > 0 {
			slices.Sort(running)
			r.errs = append(r.errs, fmt.Sprintf("Shutdown returned nil while tasks %v ran (live tokens %d)",
				running, seqsched.Live(r.s)))
			r.late = true
		}
		if n := seqsched.Live(r.s); n != 0 {
			r.errs = append(r.errs, fmt.Sprintf("Shutdown returned nil with %d live tokens", n))
			r.late = true
		}
	}
	r.quiet.Store(true)
}

func runModel(p plan) []string {
	ignore := goleak.IgnoreCurrent()
	r := &run{p: p, keyRunning: make([]int, p.keys), active: map[*rec]bool{}, ended: make([]bool, p.keys),
		discarded: make([]bool, p.keys), doneCtx: map[*rec]context.Context{}, opened: map[int]*hnd{},
		handles: make([][]*hnd, p.keys), handled: make([][nClasses]int, p.keys),
		last: make([]*handle, p.keys), epoch: make([]int, p.keys), haltsByCall: make([][nClasses]int, p.keys)}
	opts := []seqsched.Option{seqsched.WithMaxConcurrency(p.maxConc),
		seqsched.WithYieldAfter(p.yieldAfter), seqsched.WithMaxQueue(p.maxQueue)}
	if p.oneShard() {
		// Half the plans put every key on one shard, where sessions wait
		// in the start queue for each other's goroutines. (Read off the
		// plan, not drawn from it, so that recorded seeds keep their plans.)
		opts = append(opts, seqsched.WithShards(1))
	}
	if p.highBurst > 0 {
		opts = append(opts, seqsched.WithHighBurst(p.highBurst))
	}
	if p.haltAll {
		opts = append(opts, seqsched.WithHaltOnError())
	}
	if p.layer != nil || p.controls {
		// A plan with per-key control needs the log even when plain: a
		// halt reported once the plan is over is resumed from it (see
		// endPlan). Without a layer, its handler plays no script.
		opts = append(opts, seqsched.WithLogger(slog.New(&modelLog{funcHandler: funcHandler{handle: r.logHandle}, r: r})))
	}
	if l := p.layer; l != nil {
		if l.rate {
			opts = append(opts, seqsched.WithRate(r.rate))
		}
		if l.handler {
			opts = append(opts, seqsched.WithErrorHandler(r.handler))
		}
		if l.weights != nil {
			opts = append(opts, seqsched.WithWeight(r.weight))
		}
		if l.intercept {
			opts = append(opts, seqsched.WithInterceptor(r.intercept))
		}
	}
	s, err := seqsched.New[int](opts...)
	if err != nil {
		return []string{err.Error()}
	}
	r.s = s
	r.gates = make([]chan struct{}, p.gates)
	for i := range r.gates {
		r.gates[i] = make(chan struct{})
	}
	released := make([]bool, p.gates)
	var cancels, blockCancels []context.CancelFunc
	var bg sync.WaitGroup // the driver's own goroutines (Remove, Close, Discard, graceful Shutdown)
	// The driver's waits may wait for a task or callback that waits in
	// turn for a gate: they get no deadline of their own.
	r.inj.armed.Store(true)

	for _, o := range p.ops {
		switch o.kind {
		case opSubmit:
			for range o.count {
				ctx := context.Background()
				var canceled func() bool
				if o.cancelable {
					c, cancel := context.WithCancel(ctx)
					cancels = append(cancels, cancel)
					if o.spec.b == bBlockCtx {
						blockCancels = append(blockCancels, cancel)
					}
					canceled = func() bool { return c.Err() != nil }
					ctx = c
				}
				var probe *roomProbe
				if o.wait {
					probe = &roomProbe{Context: ctx, asked: make(chan struct{})}
					ctx = probe
				}
				req := subReq{ctx: ctx, key: o.key, prio: o.prio, spec: o.spec, canceled: canceled,
					post: o.post, halt: o.halt, wait: o.wait, tag: o.tag}
				if o.extra && o.handle >= 0 {
					r.mu.Lock()
					req.via = r.pickHandle(o.key, o.handle)
					r.mu.Unlock()
					req.explicit = req.via != nil
				}
				if probe != nil {
					r.submitWaiting(req, probe, &bg)
					continue
				}
				r.submit(req)
			}
		case opCancel:
			cancels[o.arg]()
		case opRelease:
			if !released[o.arg] {
				released[o.arg] = true
				close(r.gates[o.arg])
			}
		case opRemove:
			ctx, cancel := callerCtx(o.arg == 1)
			bg.Go(func() {
				defer cancel()
				r.end(endRemove, o.key, nil, ctx, "driver", false)
			})
		case opStats:
			r.stats("driver")
		case opAwait:
			r.mu.Lock()
			h := r.last[o.key]
			r.mu.Unlock()
			if h == nil {
				break
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			// An unresolved future must answer ctx's error at once; a
			// resolved one answers its outcome, which check judges.
			if _, err := h.await(ctx); !errors.Is(err, context.Canceled) {
				select {
				case <-h.done():
				default:
					r.failf("Await(canceled ctx) on an unresolved future = %v", err)
				}
			}
		case opShutdown:
			r.mu.Lock()
			r.closing = true
			r.mu.Unlock()
			if o.arg == 0 {
				bg.Go(func() {
					if err := s.Shutdown(context.Background()); err != nil {
						r.failf("graceful Shutdown = %v", err)
					} else {
						r.goQuiet()
					}
				})
				break
			}
			var ctx context.Context
			var cancel context.CancelFunc
			if o.arg == 1 {
				ctx, cancel = context.WithCancel(context.Background())
				cancel()
			} else {
				ctx, cancel = context.WithDeadline(context.Background(), time.Unix(0, 0))
			}
			// Mark forced first: tasks dropped by this call resolve
			// before it returns.
			r.markForced()
			err := s.Shutdown(ctx)
			cancel()
			if err == nil {
				r.goQuiet()
			} else if !errors.Is(err, ctx.Err()) {
				r.failf("Shutdown(done ctx) = %v; want nil or %v", err, ctx.Err())
			}
		case opOpen:
			r.mu.Lock()
			r.openLocked(o.key, nil)
			r.mu.Unlock()
		case opClose, opDiscard:
			kind := endDiscard
			var hd *hnd
			if o.kind == opClose || o.handle >= 0 {
				r.mu.Lock()
				hd = r.pickHandle(o.key, o.handle)
				r.mu.Unlock()
				if hd == nil {
					break
				}
				kind = endDiscardHandle
				if o.kind == opClose {
					kind = endClose
				}
			}
			ctx, cancel := callerCtx(o.canceled)
			bg.Go(func() {
				defer cancel()
				r.end(kind, o.key, hd, ctx, "driver", false)
			})
		case opQueued:
			r.queued(o.key)
		case opBadHandle:
			r.badHandles()
		case opCloseAll:
			r.closeAll("driver")
		case opPause, opResume:
			r.control(o)
		}
	}

	// End of plan: let every task finish, then shut down for good.
	for i, g := range r.gates {
		if !released[i] {
			close(g)
		}
	}
	for _, cancel := range blockCancels {
		cancel()
	}
	r.endPlan()
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	// The deadline only turns a hang (a lost task) into a report.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = s.Shutdown(ctx)
	cancel()
	if err == nil {
		r.goQuiet()
	}
	bg.Wait()
	r.inj.armed.Store(false)
	for _, c := range cancels {
		c()
	}
	if err != nil {
		r.failf("final Shutdown = %v: the scheduler did not go quiet", err)
		return r.errs
	}
	// Every task's ctx is done once its task is over, and keeps the contract.
	for _, rc := range r.ctxs {
		ctx := r.doneCtx[rc]
		if ctx.Err() == nil {
			r.failf("task %d: its ctx is not done once it is over", rc.id)
		}
		r.checkCtx(rc, ctx, "finished")
	}
	// Invariant 4: no goroutine of the scheduler's remains, and it holds
	// no live token (which Shutdown waits for).
	if err := goleak.Find(ignore); err != nil {
		r.failf("goroutines left after Shutdown: %v", err)
	}
	if n := seqsched.Live(s); n != 0 {
		r.failf("%d live tokens left after Shutdown returned nil", n)
	}
	r.check()
	if r.late {
		r.failf("trace:\n%s", r.dump(nil))
	}
	return r.errs
}

// markForced records that the scheduler is about to give up (a Shutdown
// with a done ctx, or Close): from now on unstarted tasks may resolve with
// ErrClosed, and Submit may fail with it.
func (r *run) markForced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	if !r.forced {
		r.forced, r.forcedAt = true, r.tick()
	}
}

// closeAll calls Scheduler.Close, which gives up at once and returns nil.
func (r *run) closeAll(where string) {
	r.markForced()
	if err := r.s.Close(); err != nil {
		r.failf("%s: Close() = %v; want nil", where, err)
	}
}

// callerCtx is the ctx the driver gives Remove, Close or Discard: a live
// one, unrelated to any task, or one canceled already.
func callerCtx(canceled bool) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if canceled {
		cancel()
	}
	return ctx, cancel
}

// subReq is a task to submit.
type subReq struct {
	ctx      context.Context
	key      int
	prio     seqsched.Priority
	spec     taskSpec
	canceled func() bool // whether ctx was canceled
	nested   bool        // by a task or a callback
	post     bool        // by Post
	// A callback's choice of path: through via, or by key (Go when byKey
	// is set, else Submit). Without it, one task in four goes through the
	// key's handle and one in four by Go (by task id).
	explicit bool
	via      *hnd
	goFn     bool
	// Task options (per-key control), and made, which gets the task's rec
	// before it is submitted (see submitWaiting).
	halt, wait bool
	tag        string
	made       chan<- *rec
	selfWait   bool // WaitForRoom by a task in its own session: ErrWouldDeadlock if its lane is full
}

// opts returns req's task options.
func (req subReq) opts() []seqsched.TaskOption {
	return op{prio: req.prio, halt: req.halt, wait: req.wait, tag: req.tag}.opts()
}

// submit submits one task, from the driver, a task or a callback, and
// records it. It returns the future, if one was made and accepted.
func (r *run) submit(req subReq) *handle {
	key, spec := req.key, req.spec
	probe := req.ctx.Value(ctxProbeKey{})
	r.mu.Lock()
	rc := &rec{id: len(r.recs), key: key, prio: req.prio, spec: spec, nested: req.nested, posted: req.post,
		canceled: req.canceled, probe: probe, halt: req.halt || r.p.haltAll, wait: req.wait, tag: req.tag}
	r.recs = append(r.recs, rc)
	if req.made != nil {
		req.made <- rc
	}
	rc.submitBefore = r.tick()
	rc.epochBefore = r.epoch[key]
	var target, second *handle
	switch spec.b {
	case bAwait:
		target = r.last[spec.arg]
	case bFanAwait:
		target, second = r.last[spec.arg], r.last[spec.arg+1]
	}
	hd := req.via
	if !req.explicit && rc.id%4 == 1 { // one task in four through a handle on its key
		hd = r.opened[key]
		if hd == nil || (r.p.layer != nil && (hd.closeIssued || hd.killed)) {
			if hd = r.openLocked(key, rc); hd != nil { // refused while the scheduler closes
				r.opened[key] = hd
			}
		}
	}
	goFn := req.goFn || (!req.explicit && rc.id%4 == 3) // some tasks through Go, whose futures carry no value
	closedHandle := hd != nil && hd.closeReturned
	r.mu.Unlock()

	fn := func(ctx context.Context) (v int, err error) {
		r.begin(rc)
		normal := false
		defer func() { r.finish(rc, normal, v, err) }()
		// The context contract, while running; runModel checks it again
		// once the task is over.
		r.checkCtx(rc, ctx, "running")
		r.mu.Lock()
		r.ctxs = append(r.ctxs, rc)
		r.doneCtx[rc] = ctx
		r.mu.Unlock()
		if r.p.layer != nil {
			a := r.take(hsFn)
			if a.kind != aReturn {
				r.mu.Lock()
				rc.disturbed = true
				r.mu.Unlock()
			}
			r.perform(callEnv{site: hsFn, key: key, ctx: ctx, rc: rc}, a)
		}
		v, err = r.behave(rc, ctx, target, second)
		normal = true
		return v, err
	}
	fnPost := func(ctx context.Context) error { _, err := fn(ctx); return err }
	var h *handle
	var err error
	futureOf := func(f *seqsched.Future[int]) {
		if f != nil {
			h = &handle{done: f.Done, await: f.Await}
		}
	}
	goFutureOf := func(f *seqsched.Future[struct{}]) {
		if f != nil {
			h = &handle{done: f.Done, viaGo: true, await: func(ctx context.Context) (int, error) {
				_, err := f.Await(ctx)
				return -1, err
			}}
		}
	}
	opts := req.opts()
	switch {
	case hd != nil && req.post:
		err = hd.h.Post(req.ctx, fnPost, opts...)
	case hd != nil && goFn:
		f, e := hd.h.Go(req.ctx, fnPost, opts...)
		goFutureOf(f)
		err = e
	case hd != nil:
		f, e := seqsched.SubmitTo(req.ctx, hd.h, fn, opts...)
		futureOf(f)
		err = e
	case req.post:
		err = r.s.Post(req.ctx, key, fnPost, opts...)
	case goFn:
		f, e := r.s.Go(req.ctx, key, fnPost, opts...)
		goFutureOf(f)
		err = e
	default:
		f, e := seqsched.Submit(req.ctx, r.s, key, fn, opts...)
		futureOf(f)
		err = e
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	rc.submitted = r.tick()
	rc.epochAfter = r.epoch[key]
	rc.rejected = err
	if err == nil {
		rc.accepted, rc.h = true, h
		if !req.nested && h != nil {
			r.last[key] = h
		}
		return h
	}
	if h != nil {
		r.errs = append(r.errs, fmt.Sprintf("task %d: Submit returned a future and %v", rc.id, err))
	}
	// A rejection must name a reason that holds. A handle closed for good
	// refuses with a SessionError whatever the scheduler's state.
	var se *seqsched.SessionError
	switch {
	case errors.Is(err, seqsched.ErrClosed) && r.closing && !closedHandle:
	case errors.As(err, &se) && errors.Is(err, seqsched.ErrSessionClosing) &&
		(r.ended[key] || (hd != nil && hd.closeIssued)):
		if se.Key != key {
			r.errs = append(r.errs, fmt.Sprintf("task %d: refused with %v, naming key %v; want %d", rc.id, err, se.Key, key))
		}
	case errors.Is(err, seqsched.ErrQueueFull) && r.p.maxQueue > 0 && !req.wait:
	case errors.Is(err, context.Canceled) && req.wait && r.p.maxQueue > 0 && req.canceled != nil && req.canceled():
		// Its submit ctx ended while it waited for room.
	case errors.Is(err, seqsched.ErrWouldDeadlock) && req.selfWait && r.p.maxQueue > 0:
	default:
		r.errs = append(r.errs, fmt.Sprintf("task %d: submit (key %d, post %v, handle %v) rejected with %v",
			rc.id, key, req.post, hd != nil, err))
	}
	return nil
}

// behave runs the body of rc's fn: its spec's behaviour.
func (r *run) behave(rc *rec, ctx context.Context, target, second *handle) (int, error) {
	spec, key := rc.spec, rc.key
	switch spec.b {
	case bErr:
		return rc.id, errTask
	case bPanic:
		v := panicWith(spec.arg, rc.id)
		r.panicking(rc, v)
		panic(v)
	case bGoexit:
		runtime.Goexit()
	case bGosched:
		for range spec.arg {
			runtime.Gosched()
		}
	case bGate:
		<-r.gates[spec.arg]
	case bBlockCtx:
		<-ctx.Done()
		r.checkCtx(rc, ctx, "canceled") // by its submitter, a Discard or a forced Shutdown
		r.checkCause(rc, ctx)
		return rc.id, ctx.Err()
	case bSubmit:
		// A task that waits for room submits to its own key with
		// WaitForRoom too: it could never make room there, so it is
		// accepted or refused with ErrWouldDeadlock at once.
		self := rc.wait && spec.arg == key
		if rc.id%2 == 0 {
			// With the task's own ctx: the nested task inherits the
			// submit ctx, not the end of this task.
			r.submit(subReq{ctx: ctx, key: spec.arg, prio: spec.prio, spec: *spec.nested, canceled: rc.canceled,
				nested: true, wait: self, selfWait: self})
			break
		}
		// With a ctx derived from it, which ends with this task.
		derived := context.WithValue(ctx, ctxProbeKey{}, rc.id)
		r.submit(subReq{ctx: derived, key: spec.arg, prio: spec.prio, spec: *spec.nested,
			canceled: func() bool { return derived.Err() != nil }, nested: true, wait: self, selfWait: self})
	case bAwait:
		if target != nil {
			r.lend(rc)
			_, _ = target.await(ctx) // any outcome; the target is checked on its own
			r.reclaim(rc)
		}
	case bFanAwait:
		// The task counts as awaiting from before the first Await until
		// the last returns, which takes the slot back.
		r.lend(rc)
		var wg sync.WaitGroup
		for i, h := range []*handle{target, second} {
			if h != nil {
				wg.Go(func() {
					for range i * (rc.id % 4) {
						runtime.Gosched()
					}
					_, _ = h.await(ctx)
				})
			}
		}
		wg.Wait()
		r.reclaim(rc)
	case bSelfAwait:
		own := r.submit(subReq{ctx: ctx, key: key, spec: taskSpec{b: bOK}, canceled: rc.canceled, nested: true})
		if own == nil {
			break // refused: the key is draining or the scheduler closing
		}
		// Re-entry is known by ctx alone: with an unrelated ctx, Await
		// waits until that ctx ends (here, at once).
		unrelated, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := own.await(unrelated); !errors.Is(err, context.Canceled) && !isClosed(own.done()) {
			r.failf("task %d: Await of its own session's future with an unrelated, canceled ctx = %v; want context.Canceled", rc.id, err)
		}
		// ErrWouldDeadlock, unless a Discard or a forced Shutdown has
		// resolved the future already: then its outcome.
		if _, err := own.await(ctx); !errors.Is(err, seqsched.ErrWouldDeadlock) && !isClosed(own.done()) {
			r.failf("task %d: Await of its own session's future = %v; want ErrWouldDeadlock", rc.id, err)
		}
	case bSelfRemove:
		if err := r.end(endRemove, key, nil, ctx, fmt.Sprintf("task %d", rc.id), true); !errors.Is(err, seqsched.ErrWouldDeadlock) {
			r.failf("task %d: Remove of its own session = %v; want ErrWouldDeadlock", rc.id, err)
		}
	}
	return rc.id, nil
}

// checkCtx checks a task's ctx against the context contract.
func (r *run) checkCtx(rc *rec, ctx context.Context, state string) {
	for _, v := range ctxViolations(ctx, rc.probe) {
		r.failf("task %d, ctx %s: %s", rc.id, state, v)
	}
}

// checkCause checks why rc's ctx, done while its fn runs, ended:
// seqsched.Cause says ErrDiscarded only once a Discard of its key was
// issued, and context.Cause never does (the scheduler cannot make package
// context report it); otherwise both say what Err says.
func (r *run) checkCause(rc *rec, ctx context.Context) {
	cause, plain := seqsched.Cause(ctx), context.Cause(ctx)
	canceled := rc.canceled != nil && rc.canceled()
	r.mu.Lock()
	discarded, forced := r.discarded[rc.key], r.forced
	r.mu.Unlock()
	switch {
	case !canceled && !forced && cause != seqsched.ErrDiscarded:
		// Neither its submit ctx nor a forced Shutdown ended it: Discard
		// did, and Cause says so.
		r.failf("task %d: its ctx ended (%v) with its submit ctx live and no forced Shutdown; seqsched.Cause(ctx) = %v, want ErrDiscarded (Discard of key %d issued: %v)",
			rc.id, ctx.Err(), cause, rc.key, discarded)
	case errors.Is(plain, seqsched.ErrDiscarded):
		r.failf("task %d: context.Cause(ctx) = %v; only seqsched.Cause may say ErrDiscarded", rc.id, plain)
	case cause == seqsched.ErrDiscarded && !discarded:
		r.failf("task %d: seqsched.Cause(ctx) = ErrDiscarded, but no Discard of key %d was issued", rc.id, rc.key)
	case cause != seqsched.ErrDiscarded && cause != plain:
		r.failf("task %d: seqsched.Cause(ctx) = %v; context.Cause(ctx) = %v", rc.id, cause, plain)
	case cause == nil:
		r.failf("task %d: ctx done, but seqsched.Cause(ctx) = nil", rc.id)
	}
}

// begin records rc's start and checks invariants 2 (no overlap) and 3 (the
// limit) at that instant.
func (r *run) begin(rc *rec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc.start = r.tick()
	rc.starts++
	if r.quiet.Load() {
		r.errs = append(r.errs, fmt.Sprintf("task %d started after Shutdown returned nil", rc.id))
		r.late = true
	}
	if rc.rejected != nil {
		r.errs = append(r.errs, fmt.Sprintf("task %d was rejected (%v) but ran", rc.id, rc.rejected))
	}
	if r.keyRunning[rc.key]++; r.keyRunning[rc.key] > 1 {
		r.errs = append(r.errs, fmt.Sprintf("task %d overlaps another task of key %d", rc.id, rc.key))
	}
	r.active[rc] = false
	// Tasks back from an Await after a forced Shutdown do not wait for a
	// slot (see reclaim); every other running task holds one of the n.
	if r.running++; r.p.maxConc > 0 && r.running-r.beyond() > r.p.maxConc {
		r.errs = append(r.errs, fmt.Sprintf("task %d: %d tasks running, limit %d (running: %s)",
			rc.id, r.running, r.p.maxConc, r.activeList()))
	}
}

// beyond counts the running tasks that came back from an Await after a
// forced Shutdown. Called with r.mu held.
func (r *run) beyond() int {
	n := 0
	for _, past := range r.active {
		if past {
			n++
		}
	}
	return n
}

// activeList describes the tasks counted as running, for reports. Called
// with r.mu held.
func (r *run) activeList() string {
	var parts []string
	for rc, past := range r.active {
		note := ""
		if past {
			note = ", back from Await after a forced Shutdown"
		}
		parts = append(parts, fmt.Sprintf("task %d (key %d%s)", rc.id, rc.key, note))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// lend and reclaim bracket a wait in rc's fn. Under a limit the wait
// lends rc's slot, so rc stops counting against it; once the wait returns
// rc holds a slot again, and the limit is checked at that instant.
func (r *run) lend(rc *rec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inactive(rc)
}

func (r *run) reclaim(rc *rec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// After Shutdown gives up, a task back from Await takes a slot beyond
	// the limit rather than wait for one nobody will hand on.
	r.active[rc] = r.forced
	if r.running++; r.p.maxConc > 0 && r.running > r.p.maxConc && !r.forced {
		r.errs = append(r.errs, fmt.Sprintf("task %d: %d tasks running after Await, limit %d (running: %s)",
			rc.id, r.running, r.p.maxConc, r.activeList()))
	}
}

// panicking records that rc's fn is about to panic with v.
func (r *run) panicking(rc *rec, v any) {
	r.mu.Lock()
	rc.exit, rc.panicVal = exitPanic, v
	r.mu.Unlock()
}

// finish records rc's end and how its fn ended: it returned (v, err)
// (normal), or else panicked (recorded by panicking) or called
// runtime.Goexit (its spec's, or an injected one).
func (r *run) finish(rc *rec, normal bool, v int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc.end = r.tick()
	r.keyRunning[rc.key]--
	r.inactive(rc)
	switch {
	case normal:
		rc.exit, rc.retV, rc.retErr = exitReturn, v, err
	case rc.exit != exitPanic:
		rc.exit = exitGoexit
	}
}

// inactive stops counting rc as running. Called with r.mu held.
func (r *run) inactive(rc *rec) {
	delete(r.active, rc)
	r.running--
}

// check holds the finished run against invariants 1-3 and 6-8.
func (r *run) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	fail := func(format string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(format, args...)) }

	// Invariant 1: every accepted task resolved exactly once, with what its
	// fn did, or, if it never ran, with a reason that holds.
	var accepted, panics uint64
	var byPrio [2]uint64
	var outcomes [2]seqsched.Outcomes // of every task that ran, and of the futures of those that did not
	var postNever [2]uint64           // posted tasks that never ran (skipped or discarded: the count says which)
	keys := r.p.keys
	postFailed := make([][nClasses]int, keys) // failures of posted tasks that ran, by key and class
	never := make([]int, keys)                // posted tasks that never ran, by key
	maybePost := make([]int, keys)            // posted tasks whose halt a Discard may have prevented (see haltCut)
	// Whether a posted task of the key that never ran may report its
	// canceled submit ctx.
	neverCanceled := make([]bool, keys)
	neverTagged := make([]bool, keys) // a tagged posted task of the key never ran: it may have been replaced
	discardedFutures := map[*rec]bool{}
	// Invariant 11 first: it gives replacements the place they took.
	replacedFutures := r.checkReplaced(fail)
	for _, rc := range r.recs {
		if !rc.accepted {
			if rc.starts != 0 {
				fail("rejected task %d ran", rc.id)
			}
			continue
		}
		accepted++
		byPrio[rc.prio]++
		if rc.starts > 1 {
			fail("task %d ran %d times", rc.id, rc.starts)
		}
		ran := rc.starts > 0
		if ran {
			if rc.end == 0 {
				fail("task %d started but never ended", rc.id)
				continue
			}
			switch {
			case rc.exit == exitReturn && rc.retErr == nil:
				outcomes[rc.prio].Succeeded++
			case rc.exit == exitReturn:
				outcomes[rc.prio].Failed++
			default:
				outcomes[rc.prio].Panicked++
				panics++
			}
			if !rc.disturbed {
				r.checkSpec(rc, fail)
			}
		}
		if rc.posted {
			if !ran {
				postNever[rc.prio]++
				never[rc.key]++
				neverCanceled[rc.key] = neverCanceled[rc.key] || (rc.canceled != nil && rc.canceled())
				neverTagged[rc.key] = neverTagged[rc.key] || rc.tag != ""
				continue
			}
			if rc.halted() && r.haltCut(rc) {
				maybePost[rc.key]++ // its halt, or its own failure
				continue
			}
			if rc.halted() {
				continue // reported as its halt, not a second time (invariant 10)
			}
			switch rc.exit {
			case exitReturn:
				if rc.retErr != nil {
					postFailed[rc.key][ranClass(rc.retErr)]++
				}
			case exitPanic:
				postFailed[rc.key][clPanic]++
			case exitGoexit:
				postFailed[rc.key][clGoexit]++
			}
			continue
		}
		select {
		case <-rc.h.done():
		default:
			fail("task %d: future unresolved after Shutdown", rc.id)
			continue
		}
		v, err := rc.h.await(context.Background())
		if ran {
			r.checkResolution(rc, v, err, fail)
			continue
		}
		if replacedFutures[rc] {
			outcomes[rc.prio].Replaced++
			continue
		}
		if errors.Is(err, seqsched.ErrDiscarded) {
			outcomes[rc.prio].Discarded++
			discardedFutures[rc] = true
			if !r.discarded[rc.key] {
				fail("task %d resolved with %v, but no Discard of key %d was issued", rc.id, err, rc.key)
			}
			continue
		}
		outcomes[rc.prio].Skipped++
		if !r.skipExplained(rc, err) {
			fail("task %d never ran but resolved with %v (canceled ctx: %v, forced Shutdown: %v)",
				rc.id, err, rc.canceled != nil && rc.canceled(), r.forced)
		}
	}

	// Invariant 6: exact Stats. Which posted tasks that never ran were
	// skipped, which discarded and which replaced only the scheduler
	// knows: their sum is exact, and the error handler's (or the log's)
	// counts of discarded and replaced ones must match. Once quiet, every
	// key was resumed (invariant 14): none is paused, none paced.
	st := r.s.Stats()
	halts, maybeHalts := r.checkHalts(fail)
	want := seqsched.Stats{Submitted: accepted, Completed: accepted, Panics: panics, Yields: st.Yields, Halts: halts}
	if st.Halts >= halts && st.Halts <= halts+maybeHalts {
		want.Halts = st.Halts // the halts a Discard may have prevented: checkHalts
	}
	var postDiscarded, postReplaced int
	for prio, got := range [2]seqsched.Outcomes{st.Normal.Outcomes, st.High.Outcomes} {
		w := outcomes[prio]
		moreSkipped, moreDiscarded := int64(got.Skipped)-int64(w.Skipped), int64(got.Discarded)-int64(w.Discarded)
		moreReplaced := int64(got.Replaced) - int64(w.Replaced)
		if moreSkipped < 0 || moreDiscarded < 0 || moreReplaced < 0 ||
			uint64(moreSkipped+moreDiscarded+moreReplaced) != postNever[prio] {
			fail("%v: Outcomes.Skipped %d, Discarded %d, Replaced %d; want %d, %d, %d plus the %d posted tasks that never ran",
				seqsched.Priority(prio), got.Skipped, got.Discarded, got.Replaced, w.Skipped, w.Discarded, w.Replaced, postNever[prio])
		} else {
			w.Skipped, w.Discarded, w.Replaced = got.Skipped, got.Discarded, got.Replaced
			postDiscarded += int(moreDiscarded)
			postReplaced += int(moreReplaced)
		}
		want.Skipped += w.Skipped
		want.Discarded += w.Discarded
		want.Replaced += w.Replaced
		ps := seqsched.PriorityStats{Completed: byPrio[prio], Outcomes: w}
		if prio == int(seqsched.Normal) {
			want.Normal = ps
		} else {
			want.High = ps
		}
	}
	if st != want {
		fail("final Stats = %+v; want %+v", st, want)
	}
	r.countControl(st)

	// Invariant 8: each failed posted task reported once.
	r.checkReports(postFailed, maybePost, never, postDiscarded, postReplaced, neverCanceled, neverTagged, fail)

	// Invariant 9: no task of a paused key started.
	r.checkPaused(fail)

	// Invariant 7, the part check can see: nothing accepted before a
	// Discard by key that returned nil started after it returned, and
	// nothing queued behind a task that Discard dropped ran.
	// And a future of the key accepted before such a Discard that never
	// ran, with no other reason to be skipped (a canceled submit ctx, a
	// forced Shutdown), resolved with ErrDiscarded.
	for _, ev := range r.ends {
		if ev.kind != endDiscard || !ev.ok {
			continue
		}
		for _, rc := range r.recs {
			if rc.key != ev.key || !rc.accepted || rc.submitted > ev.issue {
				continue
			}
			if rc.start > ev.ret {
				fail("task %d of key %d, accepted before Discard (issued at %d, returned nil at %d), started at %d",
					rc.id, rc.key, ev.issue, ev.ret, rc.start)
			}
			if rc.starts == 0 && !rc.posted && !r.forced && (rc.canceled == nil || !rc.canceled()) &&
				!discardedFutures[rc] && !replacedFutures[rc] && isClosed(rc.h.done()) {
				_, err := rc.h.await(context.Background())
				fail("task %d of key %d, accepted before Discard (issued at %d, returned nil at %d), never ran and resolved with %v; want ErrDiscarded",
					rc.id, rc.key, ev.issue, ev.ret, err)
			}
		}
	}
	for y := range discardedFutures {
		for _, x := range r.recs {
			// Places, not submits: a replacement is queued where the task
			// it replaced was (see rec.from).
			if x.key != y.key || x.prio != y.prio || x.start == 0 || !sameEpoch(x, y) || x.noOrder || y.noOrder ||
				x.from() < y.to() || r.endedBetween(y.key, y.submitBefore, x.submitted) {
				continue
			}
			fail("key %d: task %d ran, though it was queued behind task %d (accepted at %d and %d), which Discard dropped",
				x.key, x.id, y.id, x.submitted, y.submitted)
		}
	}

	// Invariants 2 and 3, from the started tasks of each key in start order.
	var started []*rec
	for _, rc := range r.recs {
		if rc.start != 0 {
			started = append(started, rc)
		}
	}
	sort.Slice(started, func(i, j int) bool { return started[i].start < started[j].start })
	byKey := make([][]*rec, r.p.keys)
	for _, rc := range started {
		byKey[rc.key] = append(byKey[rc.key], rc)
	}
	loose := r.pausedSpans(true)
	for key, rcs := range byKey {
		if r.p.highBurst > 0 {
			r.checkHighBurst(key, rcs, loose, fail)
		}
		for i, x := range rcs {
			// prevEnd: the previous task of the key had ended before x
			// was picked; anything accepted before then was in the queue
			// when x was picked.
			prevEnd := 0
			if i > 0 {
				prevEnd = rcs[i-1].end
				if prevEnd == 0 || prevEnd > x.start {
					fail("key %d: task %d started before task %d ended", key, x.id, rcs[i-1].id)
				}
			}
			for _, y := range rcs[i+1:] { // y started after x
				if !sameEpoch(x, y) || x.noOrder || y.noOrder {
					continue
				}
				// A task's place is fixed when it is accepted, or when it
				// is known to wait in line for room; a replacement holds
				// the place of the task it replaced (see rec.from).
				switch {
				case y.prio == x.prio && y.to() < x.from():
					fail("key %d: FIFO broken: %v task %d (placed by %d) started after task %d (placed from %d)",
						key, y.prio, y.id, y.to(), x.id, x.from())
				case y.prio == seqsched.High && x.prio == seqsched.Normal && y.to() < prevEnd && r.p.highBurst == 0:
					fail("key %d: Normal task %d was picked while High task %d (accepted at %d) waited",
						key, x.id, y.id, y.to())
				}
			}
			// Invariant 3: while x's session waited for it, every other
			// session started at most one turn of tasks. Checked with one
			// slot, where the trace is a total order of turns: with more,
			// a session holding a slot but descheduled by the Go runtime
			// looks, in a trace, like one that waits. A callback of x's
			// session that waits lends the slot meanwhile: such a wait is
			// not checked.
			if r.p.maxConc != 1 {
				continue
			}
			from := max(x.submitted, prevEnd)
			if r.lentDuring(key, from, x.start) {
				continue
			}
			// A paused key waits for its Resume, not for turns.
			if r.pausedDuring(loose, key, from, x.start) || r.resumedDuring(key, from, x.start) {
				continue
			}
			// A task of a successor waits, by design, until its key's
			// closing session is forgotten, and that session reports the
			// failures Discard dropped first, on its own goroutine, calling
			// the key's own callbacks (which may block): while an end of
			// the key (Remove, Discard, a last Close) is under way, the
			// wait is the key's, not the scheduler's to bound.
			if i > 0 && !sameEpoch(rcs[i-1], x) && r.endedBetween(key, from, x.start) {
				continue
			}
			others := map[int]int{}
			for _, o := range started {
				if o.start > from && o.start < x.start && o.key != key {
					if others[o.key]++; others[o.key] > r.turn(o.key) {
						hint := ""
						if r.epoch[key] > 0 || r.ended[key] {
							// A successor that Open made while the key's
							// session closed goes on where that session
							// left off: it does not start at the back
							// of the ready queue (regression seed
							// 4363303553723065933).
							hint = fmt.Sprintf(" (key %d's session was ended, and followed by a new one, during the run)", key)
						}
						fail("key %d: task %d waited (from %d to %d) while key %d started %d tasks; turn %d%s; trace:\n%s",
							key, x.id, from, x.start, o.key, others[o.key], r.turn(o.key), hint, r.dump(started))
						break
					}
				}
			}
		}
	}
}

// checkSpec checks that rc's fn, which no injected action disturbed, did what
// its spec says.
func (r *run) checkSpec(rc *rec, fail func(string, ...any)) {
	got := fmt.Sprintf("exit %d (%d, %v, panic %v)", rc.exit, rc.retV, rc.retErr, rc.panicVal)
	switch rc.spec.b {
	case bPanic:
		want := panicWith(rc.spec.arg, rc.id)
		ok := rc.exit == exitPanic
		switch {
		case !ok:
		case rc.spec.arg == 1:
			e, isErr := rc.panicVal.(error)
			ok = isErr && errors.Is(e, errTask)
		default:
			ok = rc.panicVal == want
		}
		if !ok {
			fail("task %d (%v): %s; want a panic with %v", rc.id, rc.spec, got, want)
		}
	case bGoexit:
		if rc.exit != exitGoexit {
			fail("task %d (%v): %s; want runtime.Goexit", rc.id, rc.spec, got)
		}
	case bErr:
		if rc.exit != exitReturn || rc.retV != rc.id || rc.retErr != errTask {
			fail("task %d (%v): %s; want (%d, %v)", rc.id, rc.spec, got, rc.id, errTask)
		}
	case bBlockCtx:
		if rc.exit != exitReturn || rc.retV != rc.id || !errors.Is(rc.retErr, context.Canceled) {
			fail("task %d (%v): %s; want (%d, %v)", rc.id, rc.spec, got, rc.id, context.Canceled)
		}
	default:
		if rc.exit != exitReturn || rc.retV != rc.id || rc.retErr != nil {
			fail("task %d (%v): %s; want (%d, nil)", rc.id, rc.spec, got, rc.id)
		}
	}
}

// checkResolution checks that the future of rc, which ran, resolved with
// (v, err) as its fn ended.
func (r *run) checkResolution(rc *rec, v int, err error, fail func(string, ...any)) {
	var perr *seqsched.PanicError
	switch rc.exit {
	case exitReturn:
		if rc.h.viaGo {
			v = rc.retV // Go's futures carry no value to compare
		}
		if v != rc.retV || err != rc.retErr {
			fail("task %d (%v) returned (%d, %v) but resolved with (%d, %v)", rc.id, rc.spec, rc.retV, rc.retErr, v, err)
		}
	case exitPanic:
		switch {
		case !errors.As(err, &perr):
			fail("task %d panicked but resolved with %v", rc.id, err)
		case rc.panicVal == nil:
			var nilErr *runtime.PanicNilError
			if e, ok := perr.Value.(error); !ok || !errors.As(e, &nilErr) {
				fail("task %d panicked with nil; PanicError.Value = %v", rc.id, perr.Value)
			}
		case perr.Value != rc.panicVal:
			fail("task %d: PanicError.Value = %v; want %v", rc.id, perr.Value, rc.panicVal)
		}
	case exitGoexit:
		if !errors.Is(err, seqsched.ErrGoexit) {
			fail("task %d called Goexit but resolved with %v", rc.id, err)
		}
	}
}

// skipExplained reports whether err is a reason that holds for rc, which
// never ran, to be skipped.
func (r *run) skipExplained(rc *rec, err error) bool {
	switch {
	case errors.Is(err, context.Canceled) && rc.canceled != nil && rc.canceled():
	case errors.Is(err, context.Canceled) && rc.nested && r.forced:
		// A nested task's submit ctx is its parent task's, which a
		// forced Shutdown cancels.
	case errors.Is(err, seqsched.ErrClosed) && r.forced:
	default:
		return false
	}
	return true
}

// checkReports holds the error handler's calls (or, without one, the log's
// records of posted tasks' failures) against the posted tasks: one per
// failure of a task that ran, by class, exactly; one per task that never
// ran, of a class that task could fail with. Called with r.mu held.
func (r *run) checkReports(postFailed [][nClasses]int, maybePost, never []int, postDiscarded, postReplaced int,
	neverCanceled, neverTagged []bool, fail func(string, ...any)) {
	l := r.p.layer
	if l == nil {
		return
	}
	logged := make([][nClasses]int, r.p.keys)
	counts := map[string]int{}
	for _, lr := range r.logs {
		counts[lr.msg]++
		if lr.msg != "seqsched: posted task failed" {
			continue
		}
		c, ok := logClass(lr.err, lr.level)
		if !ok {
			fail("log: posted task of key %d failed with %v, logged at %v; want %v", lr.key, lr.err, lr.level, wantLevels(lr.err))
		}
		if lr.key >= 0 && lr.key < r.p.keys {
			logged[lr.key][c]++
		} else {
			fail("log: posted task failed with %v, with session %d", lr.err, lr.key)
		}
	}
	// Unless a panic or Goexit left Enabled, every record reaches Handle.
	exactLog := !r.logDropped.Load()
	if exactLog {
		var fnPanics, fnGoexits int
		for _, rc := range r.recs {
			if rc.accepted && rc.starts > 0 {
				switch rc.exit {
				case exitPanic:
					fnPanics++
				case exitGoexit:
					fnGoexits++
				}
			}
		}
		for msg, want := range map[string]int{
			"seqsched: task panicked":                          fnPanics,
			"seqsched: task called runtime.Goexit":             fnGoexits,
			"seqsched: WithErrorHandler panicked":              int(r.handlerExits[aPanic].Load()),
			"seqsched: WithErrorHandler called runtime.Goexit": int(r.handlerExits[aGoexit].Load()),
			haltMsg: 0, // with an error handler; checkHalts counts them without one
		} {
			if msg == haltMsg && !l.handler {
				continue
			}
			if counts[msg] != want {
				fail("log: %d records %q; want %d", counts[msg], msg, want)
			}
		}
		r.checkWeightLogs(counts, fail)
	}
	got, what := r.handled, "error handler"
	if l.handler {
		for k := range postFailed {
			// The handler cannot tell fn's ctx.Err() from a canceled
			// submit ctx's: both are context.Canceled.
			postFailed[k][clCanceled] += postFailed[k][clFnCanceled]
			postFailed[k][clFnCanceled] = 0
		}
	} else {
		if !exactLog {
			return
		}
		got, what = logged, "log"
		for k := range postFailed {
			// Without a handler, a panic or Goexit of fn is logged with a
			// record of its own.
			postFailed[k][clPanic], postFailed[k][clGoexit] = 0, 0
		}
	}
	discarded, replaced := 0, 0
	for k := range r.p.keys {
		extra := 0
		slack := maybePost[k] // reported as a halt, or as their own failure
		for c := range nClasses {
			if c == clHalt {
				continue // checkHalts counts them
			}
			d := got[k][c] - postFailed[k][c]
			var plausible bool
			switch c {
			case clCanceled:
				plausible = neverCanceled[k]
			case clDiscarded:
				plausible = r.discarded[k]
			case clClosed:
				plausible = r.forced
			case clReplaced:
				plausible = neverTagged[k]
			}
			if d > 0 && !plausible {
				take := min(d, slack)
				slack -= take
				d -= take
			}
			if d < 0 || (d > 0 && !plausible) {
				fail("%s: key %d: %d %s failures reported; %d posted tasks that ran failed so, and %d never ran",
					what, k, got[k][c], classNames[c], postFailed[k][c], never[k])
			}
			extra += max(d, 0)
		}
		if extra < never[k] || extra > never[k]+slack {
			fail("%s: key %d: %d reports of posted tasks that never ran; %d never ran (reports by class %v, failures of those that ran %v)",
				what, k, extra, never[k], got[k], postFailed[k])
		}
		discarded += got[k][clDiscarded]
		replaced += got[k][clReplaced]
	}
	if discarded != postDiscarded {
		fail("%s: %d posted tasks reported discarded; Stats count %d", what, discarded, postDiscarded)
	}
	if replaced != postReplaced {
		fail("%s: %d posted tasks reported replaced; Stats count %d", what, replaced, postReplaced)
	}
}

// Weight records, as the core writes them.
const (
	weightRange  = "seqsched: WithWeight out of range; using weight 1 (logged once)"
	weightPanic  = "seqsched: WithWeight panicked; using weight 1"
	weightGoexit = "seqsched: WithWeight called runtime.Goexit; using weight 1"
)

// checkWeightLogs holds the log's WithWeight records against what the
// weight function did: a weight out of range is logged once per scheduler,
// and so, as WithWeight's doc says, is a weight function that panics or
// calls runtime.Goexit. Called with r.mu held.
func (r *run) checkWeightLogs(counts map[string]int, fail func(string, ...any)) {
	for msg, n := range counts {
		if strings.Contains(msg, "WithWeight") && msg != weightRange && msg != weightPanic && msg != weightGoexit {
			fail("log: %d unexpected WithWeight records %q", n, msg)
		}
	}
	if want := b2i(r.badWeight.Load()); counts[weightRange] != want {
		fail("log: %d records %q; want %d (a weight was out of range: %v)", counts[weightRange], weightRange, want, want == 1)
	}
	panics, goexits := int(r.weightExits[aPanic].Load()), int(r.weightExits[aGoexit].Load())
	if counts[weightPanic]+counts[weightGoexit] != min(panics+goexits, 1) ||
		counts[weightPanic] > panics || counts[weightGoexit] > goexits {
		fail("log: %d records %q and %d %q; the weight function panicked %d times and called Goexit %d times (logged once per scheduler)",
			counts[weightPanic], weightPanic, counts[weightGoexit], weightGoexit, panics, goexits)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endedBetween reports whether a call that ends key's session (Remove,
// Discard, a Close) was under way at some point between ticks from and to.
func (r *run) endedBetween(key, from, to int) bool {
	for _, ev := range r.ends {
		if ev.key == key && ev.issue < to && (ev.ret == 0 || ev.ret > from) {
			return true
		}
	}
	return false
}

// lentDuring reports whether a callback of key's session (or of an unknown
// one) waited, lending its slot, at some point between ticks from and to.
func (r *run) lentDuring(key, from, to int) bool {
	for _, w := range r.windows {
		if (w.key == key || w.key < 0) && w.from < to && (w.to == 0 || w.to > from) {
			return true
		}
	}
	return false
}

// turn is how many tasks key's session runs in a turn at most.
func (r *run) turn(key int) int {
	w := 1
	if l := r.p.layer; l != nil && l.weights != nil && l.weights[key] >= seqsched.MinWeight && l.weights[key] <= seqsched.MaxWeight {
		w = l.weights[key]
	}
	return r.p.yieldAfter * w
}

// sameEpoch reports whether x and y were both accepted in one known epoch
// of their key (see rec.epochBefore).
func sameEpoch(x, y *rec) bool {
	return x.epochBefore == x.epochAfter && y.epochBefore == y.epochAfter && x.epochBefore == y.epochBefore
}

// dump lists a run's events in order, for failure messages.
func (r *run) dump(started []*rec) string {
	type ev struct {
		seq  int
		what string
	}
	var evs []ev
	for _, rc := range r.recs {
		evs = append(evs, ev{rc.submitBefore, fmt.Sprintf("submit   key=%d id=%d", rc.key, rc.id)})
		evs = append(evs, ev{rc.submitted, fmt.Sprintf("accepted key=%d id=%d %v %v post=%v err=%v",
			rc.key, rc.id, rc.prio, rc.spec, rc.posted, rc.rejected)})
		if rc.start != 0 {
			evs = append(evs, ev{rc.start, fmt.Sprintf("start    key=%d id=%d", rc.key, rc.id)},
				ev{rc.end, fmt.Sprintf("end      key=%d id=%d", rc.key, rc.id)})
		}
	}
	for _, w := range r.windows {
		evs = append(evs, ev{w.from, fmt.Sprintf("lend     key=%d (a callback waits)", w.key)})
		if w.to != 0 {
			evs = append(evs, ev{w.to, fmt.Sprintf("reclaim  key=%d", w.key)})
		}
	}
	for _, e := range r.ends {
		evs = append(evs, ev{e.issue, fmt.Sprintf("%-8s key=%d", endNames[e.kind], e.key)})
		if e.ret != 0 {
			evs = append(evs, ev{e.ret, fmt.Sprintf("%-8s key=%d returned nil", endNames[e.kind], e.key)})
		}
	}
	if r.forced {
		evs = append(evs, ev{r.forcedAt, "Shutdown gave up"})
	}
	if r.quietAt != 0 {
		evs = append(evs, ev{r.quietAt, "Shutdown returned nil"})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].seq < evs[j].seq })
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%4d %s\n", e.seq, e.what)
	}
	return b.String()
}
