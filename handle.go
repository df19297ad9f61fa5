package seqsched

import "context"

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
	return submitTo[K, struct{}](ctx, h, nil, fn, opts)
}

// SubmitTo queues fn on the handle's session and returns its future, as
// [Submit] does for the key, with the same rules and errors; a closed
// handle returns an error wrapping [ErrSessionClosing].
func SubmitTo[K comparable, T any](ctx context.Context, h *Session[K], fn func(context.Context) (T, error),
	opts ...TaskOption) (*Future[T], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submitTo(ctx, h, fn, nil, opts)
}

func submitTo[K comparable, T any](ctx context.Context, h *Session[K],
	fn func(context.Context) (T, error), fn0 func(context.Context) error, opts []TaskOption) (*Future[T], error) {
	if h == nil {
		return nil, errNilSession
	}
	prio, err := h.s.check(ctx, opts)
	if err != nil {
		return nil, err
	}
	f := &Future[T]{fn: fn, fn0: fn0}
	f.t.parent, f.t.prio, f.t.job = submitCtx(ctx), prio, f
	f.wg.Add(1)
	if err := h.s.enqueueTo(h, &f.t); err != nil {
		return nil, err
	}
	return f, nil
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
	return post(ctx, h.s, fn, opts, func(t *task) error { return h.s.enqueueTo(h, t) }, h.key)
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
