package seqsched

// sessionList is an intrusive FIFO of sessions, doubly linked through one
// of each session's two sets of links: listIdle, for a shard's idle
// records, and listReady, for the queue of sessions waiting for a
// goroutine: the slots' ready queue under WithMaxConcurrency, or else a
// shard's start queue (shard.pending). A session is in at most one list of
// each kind at a time; membership, and the links, are guarded by the lock
// of the list's owner (the shard's, or the slots').
type sessionList[K comparable] struct {
	head, tail *session[K]
	n          int
	which      int // listIdle or listReady
}

// The lists a session can be in, each with its own links.
const (
	listIdle = iota
	listReady
	nLists
)

// links are a session's place in one list.
type links[K comparable] struct {
	prev, next *session[K]
	in         bool
	recent     bool // the idle list's: idle again since listed (see keepIdle)
}

func (l *sessionList[K]) at(sess *session[K]) *links[K] { return &sess.links[l.which] }

// contains reports whether sess is in l.
func (l *sessionList[K]) contains(sess *session[K]) bool { return l.at(sess).in }

// pushFront puts sess first (the idle list's newest).
func (l *sessionList[K]) pushFront(sess *session[K]) {
	*l.at(sess) = links[K]{next: l.head, in: true}
	if l.head != nil {
		l.at(l.head).prev = sess
	} else {
		l.tail = sess
	}
	l.head = sess
	l.n++
}

// pushBack puts sess last (the ready queue's newest).
func (l *sessionList[K]) pushBack(sess *session[K]) {
	*l.at(sess) = links[K]{prev: l.tail, in: true}
	if l.tail != nil {
		l.at(l.tail).next = sess
	} else {
		l.head = sess
	}
	l.tail = sess
	l.n++
}

// remove takes sess, which must be in l, out of it.
func (l *sessionList[K]) remove(sess *session[K]) {
	lk := l.at(sess)
	if lk.prev != nil {
		l.at(lk.prev).next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		l.at(lk.next).prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	*lk = links[K]{}
	l.n--
}

// replace puts succ, which is in no list of l's kind, in old's place.
func (l *sessionList[K]) replace(old, succ *session[K]) {
	lk := *l.at(old)
	*l.at(succ) = lk
	if lk.prev != nil {
		l.at(lk.prev).next = succ
	} else {
		l.head = succ
	}
	if lk.next != nil {
		l.at(lk.next).prev = succ
	} else {
		l.tail = succ
	}
	*l.at(old) = links[K]{}
}
