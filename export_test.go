package seqsched

import (
	"context"
	"fmt"
	"reflect"
	"unsafe"
)

// WithShards sets how many shards a scheduler has (a power of two). With 1,
// every key shares one shard, so tests exercise what shard-mates do to each
// other whatever the keys hash to.
func WithShards(n int) Option { return shardsOption(n) }

type shardsOption int

func (o shardsOption) apply(opts *options) { opts.shards = int(o) }

// WithIdleRecords sets how many idle records a scheduler keeps over all
// its shards (at least one per shard), so that tests reach the cap with a
// few keys.
func WithIdleRecords(n int) Option { return idleRecordsOption(n) }

type idleRecordsOption int

func (o idleRecordsOption) apply(opts *options) { opts.idleRecords = int(o) }

// IdleRecords returns the keys of s's idle records (idle sessions no
// handle holds), shard by shard from the idle list's oldest end, and how
// many sessions its shards' idle lists hold, idle records or not (see
// keepIdle). It fails if a shard lists more sessions than its cap, if an
// idle record is off the list, where no cap reaches it, or if a forgotten
// session or one a handle holds is on it.
func IdleRecords[K comparable](s *Scheduler[K]) (keys []K, listed int, err error) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for sess := sh.idle.tail; sess != nil; sess = sess.links[listIdle].prev {
			if sess.state == stateGone || sess.handles > 0 {
				err = fmt.Errorf("%v: a forgotten session, or one a handle holds, on the idle list", sess.key)
			}
			if sess.state == stateIdle && sess.handles == 0 {
				keys = append(keys, sess.key)
			}
		}
		for _, sess := range sh.sessions {
			if sess.state == stateIdle && sess.handles == 0 && !sess.links[listIdle].in {
				err = fmt.Errorf("%v: an idle record off the idle list, where no cap reaches it", sess.key)
			}
		}
		if sh.idle.n > s.idleCap {
			err = fmt.Errorf("shard %d lists %d sessions, over its cap of %d", i, sh.idle.n, s.idleCap)
		}
		listed += sh.idle.n
		sh.mu.Unlock()
	}
	return keys, listed, err
}

// Live returns s's live tokens: its goroutines, and its sessions waiting
// for a slot. 0 once Shutdown returned nil.
func Live[K comparable](s *Scheduler[K]) int64 { return s.tokens() }

func init() { checkMoves = true }

// BadMoves counts, over every scheduler of the test binary, the session
// moves that are not edges of the state machine's diagram (session.go).
func BadMoves() int64 { return badMoves.Load() }

// Edge is one edge of the session state machine (session.go's edges),
// by name: When is "", "paused" or "not paused".
type Edge struct{ From, On, To, When string }

// Edges returns the session state machine's table, in its order.
func Edges() []Edge {
	var es []Edge
	for _, e := range edges {
		when := ""
		switch e.when {
		case ifPaused:
			when = "paused"
		case unlessPaused:
			when = "not paused"
		}
		es = append(es, Edge{e.from.String(), e.on.String(), e.to.String(), when})
	}
	return es
}

// Transition is the state machine's decision (session.go's transition),
// by name; ok is false when no edge leaves from on that event.
func Transition(from, on string, paused bool) (to string, ok bool) {
	f, e := state(0), event(0)
	for f < nStates && f.String() != from {
		f++
	}
	for e < nEvents && e.String() != on {
		e++
	}
	if f == nStates || e == nEvents {
		return "", false
	}
	st, ok := transition(f, e, paused)
	if !ok {
		return "", false
	}
	return st.String(), true
}

// TaskSizes returns the sizes of a task's one allocation: a Go future
// (Future[struct{}]), a Submit future of an int (Future[int]) and a posted
// task.
func TaskSizes() (goFuture, intFuture, post uintptr) {
	return unsafe.Sizeof(Future[struct{}]{}), unsafe.Sizeof(Future[int]{}), unsafe.Sizeof(posted{})
}

// AddTokensThrough takes n live tokens through stripe i (shard i), or
// gives -n back, as the scheduler's goroutines do.
func AddTokensThrough[K comparable](s *Scheduler[K], i int, n int64) { s.addTokens(&s.shards[i], n) }

// TakeTokenUnlessQuiet takes a live token through stripe i unless the
// scheduler is quiet, as Shutdown's Warn record does.
func TakeTokenUnlessQuiet[K comparable](s *Scheduler[K], i int) bool {
	return s.takeTokenUnlessQuiet(&s.shards[i])
}

// Seal is Shutdown's seal, after its barrier.
func Seal[K comparable](s *Scheduler[K]) { s.seal() }

// Quiet is closed once no live token is held after the seal.
func Quiet[K comparable](s *Scheduler[K]) <-chan struct{} { return s.quiet }

// RecycleIdle forgets key's session, which must be an idle record, and
// recycles it, as keepIdle does with the record it evicts past the cap. It
// returns the fields the recycled record did not zero, besides the three
// it keeps (base.core, base.spare, start).
func RecycleIdle[K comparable](s *Scheduler[K], key K) ([]string, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sess := sh.sessions[key]
	if sess == nil || sess.state != stateIdle || !sess.links[listIdle].in {
		return nil, fmt.Errorf("%v is not an idle record", key)
	}
	s.fire(sh, sess, evForget) // takes it off the idle list
	s.recycle(sess)
	var kept []string
	v := reflect.ValueOf(sess).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		switch name {
		case "start":
			continue
		case "base":
			b := v.Field(i)
			for j := range b.NumField() {
				if n := b.Type().Field(j).Name; n != "core" && n != "spare" && !b.Field(j).IsZero() {
					kept = append(kept, "base."+n)
				}
			}
			continue
		}
		if !v.Field(i).IsZero() {
			kept = append(kept, name)
		}
	}
	return kept, nil
}

// WaitPastItsCheck is Await's wait, as an Await that found f unresolved
// and was then held up reaches it.
func WaitPastItsCheck[T any](f *Future[T], ctx context.Context) bool { return f.wait(ctx) }

// SpareParkerFree reports whether the spare parker (see parkers) of key's
// session record is made and free for the next Await.
func SpareParkerFree[K comparable](s *Scheduler[K], key K) bool {
	sh := s.shard(key)
	sh.mu.Lock()
	sess := sh.sessions[key]
	sh.mu.Unlock()
	if sess == nil {
		return false
	}
	return sess.spare.p.Load() != nil && sess.spare.free.Load()
}
