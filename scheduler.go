// Package seqsched runs tasks in order per session, with a priority lane,
// fairly across sessions, and with no goroutine for an idle session.
//
// Servers that talk to many clients need each client's work to run one task
// at a time in the order it was submitted (a WebSocket connection's
// outbound messages, a bank account's operations), urgent work to jump the
// queue, and one chatty client to never starve the rest. A [Scheduler] keys
// tasks by session: each session has a High and a Normal FIFO, gets a
// goroutine only while it has work, and gives way to waiting sessions after
// a bounded number of tasks.
//
//	s, err := seqsched.New[string]()
//	if err != nil { ... }
//	defer s.Shutdown(context.Background())
//
//	f, err := seqsched.Submit(ctx, s, "alice", func(ctx context.Context) (int, error) {
//		return withdraw(ctx, "alice", 50)
//	})
//	if err != nil { ... } // not accepted: ErrClosed, ErrSessionClosing, ErrQueueFull
//	balance, err := f.Await(ctx)
//
//	s.Go(ctx, "alice", freezeAccount, seqsched.High) // runs before alice's queued work
//
// Costs: one allocation per task (the task and its future together, 128
// bytes plus the result), no goroutine per task, no channel unless a future
// is awaited with a cancelable ctx or its Done is called, and no goroutine
// for a session once its queues are empty (only a small record, of which a
// scheduler keeps a bounded number for reuse). BENCHMARKS.md in the
// repository has the measured numbers.
//
// Every function the scheduler is given (fn, a ctx's methods, the logger,
// the weight function, the error handler) may panic, call runtime.Goexit,
// block, or call back into the scheduler: nothing is lost, the scheduler
// stays usable, and a call that would wait for the goroutine it runs on
// returns [ErrWouldDeadlock] instead.
package seqsched

import (
	"context"
	"hash/maphash"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Scheduler runs tasks keyed by session (K, for example a connection ID or an
// account number), under these rules:
//
//   - Tasks of one session never overlap and start in submission order
//     within a priority; each task happens-before the next of its session.
//   - When a session picks its next task it takes the oldest High task, else
//     the oldest Normal one. A running task is never interrupted. High
//     tasks can starve Normal ones of their own session if they keep coming
//     (see WithHighBurst).
//   - A session gets a goroutine only when it has work, at most one at a
//     time, and gives it up when its queues are empty; a task that blocks
//     delays no other session. An idle session keeps no goroutine and no
//     tasks, and memory does not grow with the number of keys ever seen.
//     New starts no goroutine; there are no timers and no polling.
//   - After every WithYieldAfter tasks (a turn; see also WithWeight and
//     WithYieldInterval) a session checks for waiting sessions. Under
//     WithMaxConcurrency it goes to the back of the FIFO ready queue and
//     hands its slot to the head; without a limit it calls runtime.Gosched.
//     A lone session drains without yielding.
//
// Create one with [New]; the zero value is not usable. All methods are safe
// for concurrent use, including from inside tasks and every callback. Stop
// it with [Scheduler.Shutdown], which waits for the goroutines it started.
type Scheduler[K comparable] struct {
	opts    options
	seed    maphash.Seed
	shards  []shard[K]
	mask    uint64
	idleCap int // each shard's idle records (see keepIdle): idleRecords over all shards
	slots   slots[K]
	pool    sync.Pool // of *session[K]
	workers sync.Pool // of *worker[K]

	// live counts the live tokens: one per worker, and one per session
	// waiting in the ready queue (see the design comment on type worker
	// and on activate). Shutdown is done when it reaches zero. Sessions in
	// a shard's start queue hold none: while it is not empty, a starter
	// holding one is on its way. A token is taken under the lock that
	// publishes what holds it, so Shutdown's barrier (closed set, then
	// every shard lock taken once) sees every token a Submit that saw
	// closed unset takes, and only then may live reaching zero end it:
	// the barrier adds sealedBit, and the scheduler is quiet when live is
	// sealedBit, read from the one atomic operation that made it so. A
	// worker gives its token back as its last act.
	live      atomic.Int64
	slack     atomic.Int64 // live tokens minus running workers and sessions in the ready queue; kept only under checkTokens
	closed    atomic.Bool  // Shutdown began: Submit fails
	forced    atomic.Bool  // Shutdown gave up: no task starts
	quiet     chan struct{}
	quietOnce sync.Once
	closeOnce sync.Once
	cancel    context.CancelFunc // cancels core.force: Shutdown gave up
	core      core               // what tasks need of the scheduler

	yields    atomic.Uint64
	slowTasks atomic.Uint64

	checkKeys    bool           // K can hold a key a map cannot (see keyCheckNeeded)
	errHandler   func(K, error) // WithErrorHandler, or nil
	weight       func(K) int    // WithWeight, or nil
	weightLogged atomic.Bool    // a bad weight was logged
	hist         *[2]histogram  // queue waits by priority, for the quantiles; nil without WithWaitHistogram
	waitHist     *[2]HistogramRecorder
	runHist      *[2]HistogramRecorder // run times by priority; nil without WithRunHistogram
	epoch        time.Time             // time origin of task.at
}

// New returns a scheduler configured by opts. It starts no goroutine. An
// out-of-range option makes it return an [*OptionError] wrapping
// [ErrInvalidOption] that names the option and its value.
func New[K comparable](opts ...Option) (*Scheduler[K], error) {
	o, err := newOptions[K](opts)
	if err != nil {
		return nil, err
	}
	n := shardCount(runtime.GOMAXPROCS(0))
	if o.shards > 0 {
		n = o.shards
	}
	s := &Scheduler[K]{
		opts:    o,
		seed:    maphash.MakeSeed(),
		shards:  make([]shard[K], n),
		mask:    uint64(n - 1),
		idleCap: idleRecords / n,
		quiet:   make(chan struct{}),
	}
	var force context.Context
	force, s.cancel = context.WithCancel(context.Background())
	s.core = core{force: force, owner: s}
	s.weight, _ = o.weight.(func(K) int)
	s.errHandler, _ = o.errHandler.(func(K, error))
	s.checkKeys = keyCheckNeeded(reflect.TypeFor[K]())
	if o.waitHistogram {
		s.hist, s.waitHist = new([2]histogram), new([2]HistogramRecorder)
	}
	if o.runHistogram {
		s.runHist = new([2]HistogramRecorder)
	}
	if o.waitHistogram || o.runHistogram {
		s.epoch = time.Now()
	}
	s.pool.New = func() any {
		sess := &session[K]{lanes: lanes{core: &s.core}}
		sess.launch = func() { s.launch(sess) }
		return sess
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.starterFn = func() { s.runStarter(sh) }
	}
	s.workers.New = s.newWorker
	return s, nil
}

// Queued returns how many tasks wait in key's High and Normal lanes, the
// running one not counted; an unknown or idle key reports 0, 0.
func (s *Scheduler[K]) Queued(key K) (high, normal int) {
	if s == nil || s.shards == nil || s.validKey(key) != nil {
		return 0, 0
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sess := sh.sessions[key]; sess != nil {
		return sess.high.n, sess.normal.n
	}
	return 0, 0
}

// sealedBit is added to live once Shutdown's barrier passed (seal), so
// that "no token left, after the barrier" is one value of one word. A
// release decides from the value its own decrement returned: with a
// separate flag, a release that gave back the last token before Shutdown
// began, and was preempted before it read the flag, read it set later and
// ended Shutdown while tokens taken since were held. The live tokens
// never come near it.
const sealedBit = 1 << 40

// tokens returns the live tokens, without sealedBit.
func (s *Scheduler[K]) tokens() int64 { return s.live.Load() &^ sealedBit }

// seal marks Shutdown's barrier passed, and the scheduler quiet if no
// token is held.
func (s *Scheduler[K]) seal() {
	if s.live.Add(sealedBit) == sealedBit {
		s.quietOnce.Do(func() { close(s.quiet) })
	}
}

// takeToken takes a live token (see live).
func (s *Scheduler[K]) takeToken() {
	s.live.Add(1)
	if checkTokens {
		s.slack.Add(1)
	}
}

// release gives back n live tokens and reports the scheduler quiet if that
// was the last once Shutdown's barrier passed (see sealedBit). Not once
// closed is set: a Submit that saw closed unset may hold its shard lock,
// about to take a token, until the barrier has passed it.
func (s *Scheduler[K]) release(n int64) {
	v := s.live.Add(-n)
	if checkTokens {
		if hook := releaseHook.Load(); hook != nil {
			(*hook)(s, v)
		}
		if s.slack.Add(-n) < 0 {
			tokenViolation() // a worker runs without a token: Shutdown could return under it
		}
	}
	if v == sealedBit {
		s.quietOnce.Do(func() { close(s.quiet) })
	}
}

// exit is a worker's last act: it gives back its live token.
func (s *Scheduler[K]) exit() {
	if checkTokens {
		s.slack.Add(1)
	}
	s.release(1)
}
