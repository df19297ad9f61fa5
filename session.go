package seqsched

import "context"

// queue is an intrusive FIFO of tasks.
type queue struct {
	head, tail *task
	n          int
}

func (q *queue) push(t *task) {
	t.next = nil
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.n++
}

func (q *queue) pop() *task {
	t := q.head
	if t == nil {
		return nil
	}
	q.head = t.next
	if q.head == nil {
		q.tail = nil
	}
	t.next = nil
	q.n--
	return t
}

// lanes are a session's two FIFOs. Its address identifies the session to
// the deadlock guard.
type lanes struct {
	high, normal queue
	highRun      int   // High tasks started in a row (for WithHighBurst; see countStart)
	core         *core // the scheduler's untyped half; set once, when the session is made
}

// pop takes the oldest High task, else the oldest Normal one. With a burst
// cap (burst > 0), after burst High tasks in a row one waiting Normal task
// goes first.
func (l *lanes) pop(burst int) *task {
	if burst > 0 && l.highRun >= burst && l.normal.n > 0 {
		return l.countStart(l.normal.pop())
	}
	if l.high.n > 0 {
		return l.countStart(l.high.pop())
	}
	return l.countStart(l.normal.pop())
}

// countStart counts t, the task about to run (nil if none), in the run of High
// tasks in a row that WithHighBurst caps, and returns it. pop calls it, and
// so does Submit for the first task of an idle session, which it hands to
// the session's new goroutine without a pop.
func (l *lanes) countStart(t *task) *task {
	if t != nil && t.prio == High {
		l.highRun++
	} else {
		l.highRun = 0
	}
	return t
}

func (l *lanes) len() int { return l.high.n + l.normal.n }

// The session state machine. A session record is in exactly one of these
// states; every move between them happens under its shard's lock (sh.mu),
// and the slots' lock (slots.mu) is only ever taken inside it or alone
// (lock order: shard, then slots).
//
//   - unknown: no record in the shard's map. A task by key makes one
//     (shard.make) and it becomes waiting or running; Open makes one
//     pinned.
//   - idle record: in the map and on the shard's record list, not
//     scheduled, no tasks (shard.retire). Counted in nidle, at most
//     idleRecords over all shards (4,096, about 200 bytes each); when the
//     records are full a retiring session is mostly forgotten at once,
//     and every evictEvery-th (8th) time the oldest record not reused
//     since it was listed is (shard.evictOldest). A task by key wakes it
//     (shard.wake).
//   - pinned: idle, but held by a handle (pins > 0): in the map, not on
//     the list, never evicted; counted in pinnedIdle.
//   - waiting: scheduled, with work, no goroutine: in the ready queue
//     (WithMaxConcurrency; slots.waiting) or in its shard's start queue
//     (shard.pending).
//   - running: scheduled, a worker goroutine runs its turn (worker.go).
//   - draining: running or waiting with drain set (Remove, Session.Close):
//     no new task is accepted; it is forgotten when its queues empty.
//   - forgotten: out of the map (shard.forget). Recycled through the pool
//     unless a handle ever held it (then gone stays true for the handle).
//
// Live tokens: Shutdown is done when s.live reaches zero. A token is held
// by each worker goroutine, each starter goroutine on its way to a start
// queue, and each session waiting in the ready queue; sessions in a start
// queue hold none (a starter holding one is on its way while the queue is
// not empty). Named moves: takeToken (a new goroutine or a session queued
// for a slot, always before another goroutine can see it, under the lock
// that publishes it), release (a goroutine's last act, or a queued
// session's token merged into the goroutine that takes it over), and the
// hand-over of a worker's token to the goroutine that takes over after
// runtime.Goexit (takeOver, which holds a token of its own while it logs).
// In the package's tests every release checks that the tokens left cover
// the workers still running (checkTokens).
//
// The Shutdown barrier: Shutdown sets closed, then takes and releases
// every shard lock once, so that a Submit that saw closed unset has
// finished queueing (and taken its token) before Shutdown waits for zero.

// session is one key's queues and turn. It is made when an unknown key gets
// a task. When its queues empty it retires: it stays in its shard's map as
// an idle record until its key gets work again or it is dropped (see
// retire and Remove); once forgotten it is recycled through the pool.
// Fields are guarded by sh.mu unless their comment says otherwise; run and
// lanes.core are set once, when the session is made.
type session[K comparable] struct {
	lanes
	key K
	sh  *shard[K]
	// scheduled is set while the session owns a goroutine or waits for
	// one (in the ready queue or its shard's start queue); a Submit that
	// finds it unset schedules it.
	scheduled bool
	drain     *drain // set by Remove: refuse new tasks, signal when empty
	first     *task  // handed by Submit, or a starter, to the goroutine about to run sess; read by that goroutine only
	// nextReady links the ready queue (guarded by slots.mu) under
	// WithMaxConcurrency, and the shard's start queue (guarded by sh.mu)
	// without it.
	nextReady *session[K]
	// Links in the shard's record list (see shard.idleHead), while listed.
	idlePrev, idleNext *session[K]
	reused             bool // active again since it was listed or last passed over (see evictOldest)
	// Handles (see Session): pins counts the open handles; a pinned session
	// is never an idle record (never listed, counted in nidle or evicted).
	// handled marks a session a handle ever held: it is never recycled, so
	// that gone, set when it is forgotten, stays true for its handles.
	pins    int
	handled bool
	gone    bool
	launch  func() // starts a worker on this session; made once, so `go launch()` allocates nothing
}

// drain is what Remove waits on: done is closed when the session has
// emptied, been forgotten, and every future of its tasks has resolved. err
// is ErrClosed when a forced shutdown cut it short.
type drain struct {
	done chan struct{}
	err  error
}

// end reports the drain complete; nil-safe.
func (d *drain) end() {
	if d != nil {
		close(d.done)
	}
}

// A Session is a handle on one key's session, held by the code that owns
// the key (a WebSocket connection, an account being worked on). Tasks
// submitted through it join the same two FIFOs as tasks submitted by key,
// in acceptance order (a session is one thing however it is reached), but
// skip the key's hash and map lookup.
//
// An open handle pins its session: it is never dropped when idle, and it
// still costs no goroutine while idle. Close drains and removes it. Every
// Open must be matched by a Close (or a Remove of the key); a handle
// dropped without one keeps its session's small record for the life of
// the scheduler.
//
// Open of a key that already has an open handle returns another handle on
// the same session. Close of any handle of a key, or Remove of the key,
// drains the session and closes every handle on it: from then on each of
// their Go, Post and SubmitTo returns an error wrapping
// [ErrSessionClosing], and Queued reports 0, 0. A Session is safe for
// concurrent use.
type Session[K comparable] struct {
	s    *Scheduler[K]
	sh   *shard[K]
	sess *session[K]
	key  K
}

// Open returns a handle on key's session, making the session if key has
// none. It fails with [ErrClosed] once Shutdown has begun,
// [ErrSessionClosing] while key is being removed, or a [*KeyError] for a
// key a map cannot hold.
func (s *Scheduler[K]) Open(key K) (*Session[K], error) {
	if s == nil || s.shards == nil {
		return nil, notNew
	}
	if err := s.validKey(key); err != nil {
		return nil, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	sess := sh.sessions[key]
	switch {
	case sess == nil:
		sess = sh.make(s, key)
		sh.pinnedIdle++
	case sess.drain != nil:
		return nil, ErrSessionClosing
	case !sess.scheduled && sess.pins == 0: // an idle record becomes a pinned session
		sh.unidle(sess)
		if sh.listed(sess) {
			sh.unlist(sess) // Open is rare: it may touch the neighbours
		}
		sh.pinnedIdle++
	}
	sess.pins++
	sess.handled = true
	return &Session[K]{s: s, sh: sh, sess: sess, key: key}, nil
}

// Key returns the key the handle was opened on.
func (h *Session[K]) Key() K { return h.key }

// Go queues fn on the handle's session and returns its future, as
// [Scheduler.Go] does for the key, with the same rules and errors; a closed
// handle returns an error wrapping [ErrSessionClosing].
func (h *Session[K]) Go(ctx context.Context, fn func(context.Context) error, opts ...TaskOption) (*Future[struct{}], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	if h == nil {
		return nil, errNilSession
	}
	return submit[K, struct{}](ctx, h.s, h, h.key, nil, fn, opts)
}

// SubmitTo queues fn on the handle's session and returns its future, as
// [Submit] does for the key, with the same rules and errors; a closed
// handle returns an error wrapping [ErrSessionClosing].
func SubmitTo[K comparable, T any](ctx context.Context, h *Session[K], fn func(context.Context) (T, error),
	opts ...TaskOption) (*Future[T], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	if h == nil {
		return nil, errNilSession
	}
	return submit(ctx, h.s, h, h.key, fn, nil, opts)
}

// Post queues fn on the handle's session with no future: fire and forget.
// It keeps every other guarantee of Go (order, the High lane, fn's ctx,
// fairness, panics recovered, Remove and Shutdown drain it). Its failures
// (fn's error, a [*PanicError], [ErrGoexit], or, for a task that never
// ran, its submit ctx's error or [ErrClosed]) go to [WithErrorHandler], or
// without one are logged at Error through [WithLogger]. The error is
// non-nil only when the task was not accepted, as for Go.
func (h *Session[K]) Post(ctx context.Context, fn func(context.Context) error, opts ...TaskOption) error {
	if h == nil {
		return errNilSession
	}
	return post(ctx, h.s, h, h.key, fn, opts)
}

// Queued returns how many tasks wait in the session's High and Normal
// lanes, the running one not counted: how a messaging server spots a slow
// client before its queue is full. A closed handle reports 0, 0.
func (h *Session[K]) Queued() (high, normal int) {
	if h == nil {
		return 0, 0
	}
	h.sh.mu.Lock()
	defer h.sh.mu.Unlock()
	if h.sess.gone {
		return 0, 0
	}
	return h.sess.high.n, h.sess.normal.n
}

// Close drains the handle's session and removes it, as [Scheduler.Remove]
// does for the key, with the same rules and errors: new tasks are refused
// with [ErrSessionClosing] at once, accepted ones run, then the session is
// forgotten and every handle on it is closed; the key is then fresh. Close
// of a closed handle returns nil.
func (h *Session[K]) Close(ctx context.Context) error {
	if h == nil {
		return errNilSession
	}
	if ctx == nil {
		return ErrNilContext
	}
	h.sh.mu.Lock()
	if h.sess.gone {
		h.sh.mu.Unlock()
		return nil
	}
	return h.s.remove(ctx, h.sh, h.sess)
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
