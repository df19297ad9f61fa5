package seqsched

// taskFIFO is an intrusive FIFO of tasks (a session's lane).
type taskFIFO struct {
	head, tail *task
	n          int
}

func (q *taskFIFO) push(t *task) {
	t.next = nil
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.n++
}

func (q *taskFIFO) pop() *task {
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
	high, normal taskFIFO
	highRun      int    // High tasks started in a row (for WithHighBurst; see countStart)
	core         *core  // the scheduler's untyped half; set once, when the session is made
	mu           *mutex // its shard's lock, which guards the fields; set when it is made
	pred         *lanes // session.pred's lanes, for the deadlock guard (see heldBehind)
}

// heldBehind reports whether l is own, or a successor held back behind own
// (see succeed): a wait for l's tasks then waits for own's.
func heldBehind(l, own *lanes) bool {
	if l == own {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := l.pred; p != nil; p = p.pred {
		if p == own {
			return true
		}
	}
	return false
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

// countStart counts t, the task about to run (nil if none), in the run of
// High tasks in a row that WithHighBurst caps, and returns it. pop calls it,
// and so does Submit for the first task of an idle session, which it hands
// to the session's new worker without a pop.
func (l *lanes) countStart(t *task) *task {
	if t != nil && t.prio == High {
		l.highRun++
	} else {
		l.highRun = 0
	}
	return t
}

func (l *lanes) len() int { return l.high.n + l.normal.n }

// enqueue queues t on sess. Called with sh.mu held.
func (sh *shard[K]) enqueue(sess *session[K], t *task) {
	if t.prio == High {
		sess.high.push(t)
	} else {
		sess.normal.push(t)
	}
	sh.queued[t.prio]++
}

// pickNext pops sess's next task, if any, counts it running and makes it
// the session's task in hand. Called with sh.mu held.
func (sh *shard[K]) pickNext(sess *session[K], burst int) *task {
	t := sess.pop(burst)
	if t != nil {
		sh.queued[t.prio]--
		sh.running++
	}
	sess.cur = t
	return t
}
