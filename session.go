package seqsched

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
)

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
}

// pop takes the oldest High task, else the oldest Normal one.
func (l *lanes) pop() *task {
	if t := l.high.pop(); t != nil {
		return t
	}
	return l.normal.pop()
}

func (l *lanes) len() int { return l.high.n + l.normal.n }

// session is one key's queues and turn. It exists only while the key has
// queued or running work: when its queues empty, it is deleted from its
// shard and recycled. All fields but run are guarded by sh.mu.
type session[K comparable] struct {
	lanes
	key K
	sh  *shard[K]
	// scheduled is set while the session owns a goroutine or waits for
	// one in the ready queue; a Submit that finds it unset schedules it.
	scheduled bool
	drain     *drain      // set by Remove: refuse new tasks, signal when empty
	nextReady *session[K] // link in the ready queue (guarded by slots.mu)
	run       func()      // starts this session's turn; made once, so `go run()` allocates nothing
}

// drain is what Remove waits on: closed when the session has emptied and
// been forgotten. err is ErrClosed when a forced shutdown cut it short.
type drain struct {
	done chan struct{}
	err  error
}

// shard is one lock's worth of sessions. Keys are spread over shards by
// hash so that producers and sessions on different cores rarely contend.
type shard[K comparable] struct {
	mu        sync.Mutex
	sessions  map[K]*session[K]
	queued    int    // tasks waiting in this shard's sessions
	running   int    // sessions of this shard executing a task
	submitted uint64 // tasks accepted
	completed uint64 // futures resolved (counted before they resolve)
	skipped   uint64 // tasks resolved without running
	_         [64]byte
}

// retire forgets sess, which has no work left. Called with sh.mu held.
func (sh *shard[K]) retire(sess *session[K]) {
	if sh.sessions[sess.key] == sess {
		delete(sh.sessions, sess.key)
	}
	sess.scheduled = false
	if sess.drain != nil {
		close(sess.drain.done)
		sess.drain = nil
	}
}

// slots is the concurrency limit: how many sessions hold a slot, and the
// FIFO of sessions waiting for one. Only used with WithMaxConcurrency.
type slots[K comparable] struct {
	mu         sync.Mutex
	running    int
	head, tail *session[K]
}

func (q *slots[K]) push(sess *session[K]) {
	sess.nextReady = nil
	if q.tail == nil {
		q.head = sess
	} else {
		q.tail.nextReady = sess
	}
	q.tail = sess
}

func (q *slots[K]) pop() *session[K] {
	sess := q.head
	if sess == nil {
		return nil
	}
	q.head = sess.nextReady
	if q.head == nil {
		q.tail = nil
	}
	sess.nextReady = nil
	return sess
}

// schedule gives sess, just marked scheduled by Submit, a goroutine, or
// queues it for a slot. The live token Submit took moves to the goroutine
// or stays with the waiting session.
func (s *Scheduler[K]) schedule(sess *session[K]) {
	if max := s.opts.maxConcurrency; max > 0 {
		s.slots.mu.Lock()
		// After a forced shutdown nobody serves the ready queue: start the
		// session anyway, it finds its queues emptied and retires.
		if s.slots.running >= max && !s.forced.Load() {
			s.slots.push(sess)
			s.slots.mu.Unlock()
			return
		}
		s.slots.running++
		s.slots.mu.Unlock()
	}
	go sess.run()
}

// work runs turns on the calling goroutine, starting with sess and moving
// to ready sessions while a slot is held, until there is nothing to run.
func (s *Scheduler[K]) work(sess *session[K], done *task) {
	var t *task // the task whose fn is running, if it calls runtime.Goexit
	defer func() {
		if t != nil {
			s.goexit(sess, t)
		}
	}()
	n := 0 // tasks run in this turn
	for {
		var spill *task
		var more bool
		t, spill, more = s.step(sess, done, n >= s.opts.yieldAfter)
		s.resolveAll(spill)
		switch {
		case t != nil:
			n++
			if s.forced.Load() {
				t.skip = ErrClosed // no task starts after Shutdown gave up
				done, t = t, nil
				continue
			}
			if perr := t.job.exec(t); perr != nil {
				s.panics.Add(1)
				s.log(slog.LevelError, "seqsched: task panicked", sess.key, slog.Any("panic", perr.Value), slog.String("stack", string(perr.Stack)))
			}
			done, t = t, nil
		case more: // the turn is over and the session still has work
			n = 0
			sess = s.yield(sess)
			done = nil
		default: // the session went idle and was forgotten
			s.pool.Put(sess)
			n = 0
			done = nil
			if sess = s.nextReady(); sess == nil {
				s.release(1) // the goroutine's last act
				return
			}
		}
	}
}

// step, under the session's shard lock, finishes done and takes the
// session's next task, skipping tasks whose submit ctx has ended. It returns
// next == nil with more set when turnOver and work remains, and with more
// unset when the session has gone idle and been forgotten. spill lists the
// tasks to resolve once the lock is released.
func (s *Scheduler[K]) step(sess *session[K], done *task, turnOver bool) (next, spill *task, more bool) {
	sh := sess.sh
	sh.mu.Lock()
	var tail *task
	if done != nil {
		sh.running--
		sh.completed++
		if done.skip != nil {
			sh.skipped++
		}
		done.next = nil
		spill, tail = done, done
	}
	if turnOver && sess.len() > 0 {
		sh.mu.Unlock()
		return nil, spill, true
	}
	for next = sess.pop(); next != nil; next = sess.pop() {
		sh.queued--
		if err := next.parent.Err(); err == nil {
			sh.running++
			break
		} else {
			next.skip = err
		}
		sh.completed++
		sh.skipped++
		if tail == nil {
			spill = next
		} else {
			tail.next = next
		}
		tail = next
	}
	if next == nil {
		sh.retire(sess)
	}
	sh.mu.Unlock()
	return next, spill, false
}

// resolveAll resolves a list of finished or skipped tasks in order.
func (s *Scheduler[K]) resolveAll(t *task) {
	for t != nil {
		next := t.next
		t.next = nil
		t.job.resolve(t)
		t = next
	}
}

// yield ends sess's turn. With a concurrency limit, if another session waits
// for a slot, sess goes to the back of the ready queue and the head takes
// over this goroutine and slot. Without one, the goroutine yields the
// processor when other sessions have work. It returns the session to run.
func (s *Scheduler[K]) yield(sess *session[K]) *session[K] {
	if s.opts.maxConcurrency == 0 {
		if s.live.Load() > 1 {
			s.yields.Add(1)
			runtime.Gosched()
		}
		return sess
	}
	// Read the key while this goroutine still owns sess: once queued, it
	// can be run, retired and reused for another key by another goroutine.
	key := sess.key
	s.slots.mu.Lock()
	var head *session[K]
	if !s.forced.Load() {
		if head = s.slots.pop(); head != nil {
			s.slots.push(sess)
		}
	}
	s.slots.mu.Unlock()
	if head == nil {
		return sess
	}
	s.yields.Add(1)
	s.log(slog.LevelDebug, "seqsched: session yielded", key)
	return head
}

// nextReady hands the calling goroutine's slot to the next waiting session
// and returns it, or releases the slot and returns nil.
func (s *Scheduler[K]) nextReady() *session[K] {
	if s.opts.maxConcurrency == 0 {
		return nil
	}
	s.slots.mu.Lock()
	sess := s.slots.pop()
	if sess == nil {
		s.slots.running--
	}
	s.slots.mu.Unlock()
	if sess != nil {
		s.live.Add(-1) // its token merges into this goroutine's
	}
	return sess
}

// goexit runs on a goroutine that runtime.Goexit is unwinding, after fn of t
// called it. The goroutine cannot be saved; a fresh one finishes t and
// carries on with the session's turn, keeping its slot and live token.
func (s *Scheduler[K]) goexit(sess *session[K], t *task) {
	s.panics.Add(1)
	s.log(slog.LevelError, "seqsched: task called runtime.Goexit", sess.key)
	go s.work(sess, t)
}

// log writes one record about session key. A panicking handler must not
// take a worker down with it, so its panic is dropped.
func (s *Scheduler[K]) log(level slog.Level, msg string, key K, attrs ...slog.Attr) {
	l := s.opts.logger
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	defer func() { _ = recover() }()
	l.LogAttrs(ctx, level, msg, append(attrs, slog.Any("session", key))...)
}
