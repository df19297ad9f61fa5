package seqsched

import "context"

// A Session is a handle on one key's session, held by the code that owns
// the key (a WebSocket connection, an account being worked on). Tasks
// submitted through it join the same two FIFOs as tasks submitted by key,
// in acceptance order (a session is one thing however it is reached), but
// skip the key's hash and map lookup.
//
// Handles are counted, like file descriptors from dup: Open of a key with
// an open handle returns another handle on the same session, and Close
// releases only its own handle. The session drains and is forgotten when
// its last handle closes, or at once when [Scheduler.Remove] or
// [Scheduler.Discard] ends it whatever handles are open. An open handle
// pins its session: it is never dropped when idle, and it still costs no
// goroutine while idle. Every Open must be matched by a Close (or a Remove
// of the key); a handle dropped without one keeps its session's small
// record for the life of the scheduler.
//
// A closed handle, or one whose session was ended, refuses new tasks with
// a [*SessionError] wrapping [ErrSessionClosing] (whatever the state of
// the scheduler), and Queued reports 0, 0. A nil or zero *Session returns
// [ErrNotNew]. A Session is safe for concurrent use.
type Session[K comparable] struct {
	s      *Scheduler[K]
	sess   *session[K]
	key    K
	closed bool // Close was called; guarded by the session's shard lock
}

// Open returns a handle on key's session, making the session if key has
// none. If key's session is closing (its last handle's Close, Remove or
// Discard is draining it), Open makes a fresh session for key that starts
// once the closing one is forgotten, so that key's tasks still never
// overlap: a new handle never joins a closing session. Open fails with
// [ErrClosed] once Shutdown has begun, or a [*KeyError] for a key a map
// cannot hold.
func (s *Scheduler[K]) Open(key K) (*Session[K], error) {
	if !s.usable() {
		return nil, ErrNotNew
	}
	if err := s.validKey(key); err != nil {
		return nil, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.core.closed.Load() {
		return nil, ErrClosed
	}
	return &Session[K]{s: s, sess: s.open(sh, key), key: key}, nil
}

// usable reports whether h was made by Open.
func (h *Session[K]) usable() bool { return h != nil && h.s != nil }

// Key returns the key the handle was opened on (the zero K for a nil or
// zero handle).
func (h *Session[K]) Key() K {
	if h == nil {
		var zero K
		return zero
	}
	return h.key
}

// Go queues fn on the handle's session and returns its future, as
// [Scheduler.Go] does for the key, with the same rules and errors.
func (h *Session[K]) Go(ctx context.Context, fn func(context.Context) error, opts ...TaskOption) (*Future[struct{}], error) {
	if !h.usable() {
		return nil, ErrNotNew
	}
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submit[K, struct{}](ctx, h.s, h, h.key, nil, fn, opts)
}

// SubmitTo queues fn on the handle's session and returns its future, as
// [Submit] does for the key, with the same rules and errors.
func SubmitTo[K comparable, T any](ctx context.Context, h *Session[K], fn func(context.Context) (T, error),
	opts ...TaskOption) (*Future[T], error) {
	if !h.usable() {
		return nil, ErrNotNew
	}
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submit(ctx, h.s, h, h.key, fn, nil, opts)
}

// Post queues fn on the handle's session with no future, as
// [Scheduler.Post] does for the key, with the same rules and errors (see
// there which ctx to pass).
func (h *Session[K]) Post(ctx context.Context, fn func(context.Context) error, opts ...TaskOption) error {
	if !h.usable() {
		return ErrNotNew
	}
	return post(ctx, h.s, h, h.key, fn, opts)
}

// Queued returns how many tasks wait in the session's High and Normal
// lanes (and those of a closing session of its key that it waits behind),
// the running one not counted: how a messaging server spots a slow client
// before its queue is full. A closed handle reports 0, 0.
func (h *Session[K]) Queued() (high, normal int) {
	if !h.usable() {
		return 0, 0
	}
	sh := h.sess.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h.closed || h.sess.state == stateGone {
		return 0, 0
	}
	for p := h.sess; p != nil; p = p.pred {
		h.s.unstage(sh, p)
		high += p.high.n
		normal += p.normal.n + int(p.runLeft.Load())
	}
	return high, normal
}

// Close releases the handle, and drains: unlike [Scheduler.Close], which
// gives up, it drops no task. If it was the session's last open handle,
// Close drains the session and forgets it, as [Scheduler.Remove] does for
// the key, with the same rules and errors: new tasks are refused at once,
// accepted ones run, then the session is forgotten and the key is fresh.
// Close of a handle that is not the last returns nil at once, and so does
// Close of a closed handle or of one whose session Remove or Discard ended.
func (h *Session[K]) Close(ctx context.Context) error {
	return h.closeHandle(ctx, false)
}

// Discard ends the handle's session without running its backlog, as
// [Scheduler.Discard] does for the key, with the same rules and errors,
// whatever other handles are open (they are closed with it). Discard
// through a closed handle returns a [*SessionError] wrapping
// [ErrSessionClosing].
func (h *Session[K]) Discard(ctx context.Context) error {
	return h.closeHandle(ctx, true)
}

// end is Close (discard false) and Discard.
func (h *Session[K]) closeHandle(ctx context.Context, discard bool) error {
	if !h.usable() {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	sess := h.sess
	sh := sess.sh
	sh.mu.Lock()
	switch {
	case h.closed && discard:
		sh.mu.Unlock()
		return &SessionError{Key: h.key, Err: ErrSessionClosing}
	case h.closed:
		sh.mu.Unlock()
		return nil
	case sess.state == stateGone:
		h.closed = true
		sh.mu.Unlock()
		if discard {
			return &SessionError{Key: h.key, Err: ErrSessionClosing}
		}
		return nil
	}
	if !discard {
		h.closed = true
		if sess.handles--; sess.handles > 0 {
			sh.mu.Unlock()
			return nil
		}
	}
	return h.s.closeSession(ctx, sh, sess, discard)
}
