package seqsched

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// These tests look inside the shards: whether an idle session is kept as a
// record or forgotten is invisible through the public API except in memory.

func noopTask(context.Context) error { return nil }

// runOnce runs one task on each key and waits for all of them. A session's
// last future resolves in the lock section that retires it, so once every
// shard lock has been taken after the Awaits, every session is idle.
func runOnce(t *testing.T, s *Scheduler[int], keys ...int) {
	t.Helper()
	fs := make([]*Future[struct{}], 0, len(keys))
	for _, k := range keys {
		f, err := s.Go(context.Background(), k, noopTask)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	awaitOK(t, fs...)
	for i := range s.shards {
		s.shards[i].mu.Lock()
		s.shards[i].mu.Unlock() //nolint:staticcheck // the barrier is the point
	}
}

// awaitOK awaits fs in order and requires each to resolve without error.
func awaitOK(t *testing.T, fs ...*Future[struct{}]) {
	t.Helper()
	for _, f := range fs {
		_, err := f.Await(context.Background())
		require.NoError(t, err)
	}
}

// sessionOf returns key's session record, or nil.
func (s *Scheduler[K]) sessionOf(key K) *session[K] {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.sessions[key]
}

// checkIdleLists verifies every shard's record list against its map and
// returns the number of idle records in all. The scheduler must be quiet:
// the list then holds exactly the idle records (while it is not, it may
// also hold sessions that became active again).
func checkIdleLists[K comparable](t *testing.T, s *Scheduler[K]) int {
	t.Helper()
	total := 0
	for i := range s.shards {
		problem, n := idleListProblem(&s.shards[i], s.idleCap)
		require.Empty(t, problem, "shard %d", i)
		total += n
	}
	return total
}

// idleListProblem describes what is wrong with sh's record list, if anything,
// and counts its records. It holds sh.mu, so it reports instead of failing.
func idleListProblem[K comparable](sh *shard[K], idleCap int) (string, int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	var prev *session[K]
	for sess := sh.idleHead; sess != nil; sess = sess.idleNext {
		switch {
		case sess.idlePrev != prev:
			return "broken back link", n
		case sess.scheduled:
			return "a scheduled session on the list of a quiet scheduler", n
		case sess.handles > 0:
			return "a pinned session on the record list", n
		case sess.len() != 0:
			return "an idle record with queued tasks", n
		case sh.sessions[sess.key] != sess:
			return "an idle record missing from the map", n
		}
		prev = sess
		n++
	}
	switch {
	case prev != sh.idleTail:
		return "wrong tail", n
	case n != sh.nidle:
		return fmt.Sprintf("nidle %d, list holds %d", sh.nidle, n), n
	case n > idleCap:
		return fmt.Sprintf("%d records over the cap of %d", n, idleCap), n
	case len(sh.sessions) != n+sh.pinnedIdle:
		return fmt.Sprintf("%d sessions in the map but %d idle and %d pinned: the scheduler is quiet",
			len(sh.sessions), n, sh.pinnedIdle), n
	}
	return "", n
}

// keysOf returns the first n keys, counting up from from, that hash to
// shard sh.
func keysOf(s *Scheduler[int], sh *shard[int], from, n int) []int {
	var keys []int
	for k := from; len(keys) < n; k++ {
		if s.shard(k) == sh {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestIdleSessionIsReusedByItsKey(t *testing.T) {
	s, err := New[int]()
	require.NoError(t, err)
	defer s.Shutdown(context.Background())

	runOnce(t, s, 7)
	rec := s.sessionOf(7)
	require.NotNil(t, rec, "the idle session is kept as a record")
	require.Equal(t, 1, checkIdleLists(t, s))
	require.Zero(t, s.Stats().Sessions, "an idle record is not a session with work")

	runOnce(t, s, 7)
	require.Same(t, rec, s.sessionOf(7), "the key's next task reuses its record")
	require.Equal(t, 1, checkIdleLists(t, s))
}

func TestIdleRecordsAreBounded(t *testing.T) {
	s, err := New[int]()
	require.NoError(t, err)
	defer s.Shutdown(context.Background())

	keys := make([]int, 3*idleRecords)
	for i := range keys {
		keys[i] = i
	}
	for i := 0; i < len(keys); i += 500 {
		runOnce(t, s, keys[i:min(i+500, len(keys))]...)
	}
	n := checkIdleLists(t, s)
	require.LessOrEqual(t, n, idleRecords)
	require.Greater(t, n, idleRecords/2, "the list keeps records up to about its cap")
	st := s.Stats()
	require.Zero(t, st.Sessions)
	require.Equal(t, uint64(len(keys)), st.Completed)
}

func TestFullIdleListAgesOutOldRecords(t *testing.T) {
	s, err := New[int]()
	require.NoError(t, err)
	defer s.Shutdown(context.Background())

	// Fill shard 0's idle list with keys that will not come back.
	sh := &s.shards[0]
	stale := keysOf(s, sh, 0, s.idleCap)
	for i := 0; i < len(stale); i += 100 {
		runOnce(t, s, stale[i:min(i+100, len(stale))]...)
	}
	require.Equal(t, s.idleCap, sh.nidle)
	oldest := sh.idleTail.key

	// New keys of the same shard: while the list is full, a retiring
	// session forgets itself, except every evictEvery-th, which evicts the
	// oldest record and takes its place.
	fresh := keysOf(s, sh, stale[len(stale)-1]+1, evictEvery)
	for i, k := range fresh {
		runOnce(t, s, k)
		if i < evictEvery-1 {
			require.Nil(t, s.sessionOf(k), "fresh key %d forgot itself", i)
			require.NotNil(t, s.sessionOf(oldest))
		}
	}
	require.Nil(t, s.sessionOf(oldest), "the oldest record aged out")
	require.NotNil(t, s.sessionOf(fresh[evictEvery-1]), "the key that evicted it is kept")
	require.Equal(t, s.idleCap, sh.nidle)
	checkIdleLists(t, s)
}

func TestReusedRecordGetsSecondChance(t *testing.T) {
	s, err := New[int]()
	require.NoError(t, err)
	defer s.Shutdown(context.Background())

	sh := &s.shards[0]
	stale := keysOf(s, sh, 0, s.idleCap)
	for _, k := range stale { // one at a time: the list's order is stale's
		runOnce(t, s, k)
	}
	require.Equal(t, s.idleCap, sh.nidle)
	oldest, next := stale[0], stale[1]
	require.Equal(t, oldest, sh.idleTail.key)
	runOnce(t, s, oldest) // the oldest record is used again

	fresh := keysOf(s, sh, stale[len(stale)-1]+1, evictEvery)
	for _, k := range fresh {
		runOnce(t, s, k)
	}
	require.NotNil(t, s.sessionOf(oldest), "a record used again is not the one to go")
	require.Nil(t, s.sessionOf(next), "the oldest record not used again went instead")
	require.Equal(t, s.idleCap, sh.nidle)
	checkIdleLists(t, s)
}

func TestEvictionPassesOverActiveSessions(t *testing.T) {
	s, err := New[int](WithShards(1))
	require.NoError(t, err)
	defer s.Shutdown(context.Background())

	sh := &s.shards[0]
	for k := 0; k < s.idleCap; k++ {
		runOnce(t, s, k) // one at a time: key 0 is the oldest record
	}
	require.Equal(t, 0, sh.idleTail.key)

	// Key 0 becomes active again and stays so: its record stays listed,
	// at the tail, while it runs.
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open() // before the deferred Shutdown, if a check fails
	f0, err := s.Go(context.Background(), 0, func(context.Context) error { <-gate; return nil })
	require.NoError(t, err)
	sh.mu.Lock()
	tail := sh.idleTail
	sh.mu.Unlock()
	require.Same(t, tail, s.sessionOf(0))

	// The first fresh key fills the records again (key 0 left them); the
	// evictEvery-th after it evicts.
	for k := s.idleCap; k <= s.idleCap+evictEvery; k++ {
		runOnce(t, s, k)
	}
	require.NotNil(t, s.sessionOf(0), "an active session is never evicted")
	require.Nil(t, s.sessionOf(1), "the oldest idle record went")

	// Make room, so that key 0 is kept when it goes idle: the eviction
	// took it off the list, and retiring lists it again, as the newest.
	require.NoError(t, s.Remove(context.Background(), 2))
	open()
	awaitOK(t, f0)
	require.Equal(t, s.idleCap, checkIdleLists(t, s))
	require.Equal(t, 0, sh.idleHead.key)
}

func TestRemoveForgetsIdleRecord(t *testing.T) {
	s, err := New[int]()
	require.NoError(t, err)
	defer s.Shutdown(context.Background())

	runOnce(t, s, 1, 2)
	require.Equal(t, 2, checkIdleLists(t, s))
	require.NoError(t, s.Remove(context.Background(), 1))
	require.Nil(t, s.sessionOf(1), "Remove leaves nothing of the key")
	require.NotNil(t, s.sessionOf(2))
	require.Equal(t, 1, checkIdleLists(t, s))

	runOnce(t, s, 1)
	require.Equal(t, 2, checkIdleLists(t, s), "the key works again as a fresh session")
}

// An open handle pins its session: however many keys of its shard come and
// go while it is idle, it stays, and is neither an idle record nor evicted.
func TestOpenHandlePinsItsSession(t *testing.T) {
	s, err := New[int]()
	require.NoError(t, err)
	defer s.Shutdown(context.Background())
	sh := s.shard(0)
	keys := keysOf(s, sh, 0, 2*s.idleCap+1) // keys[0] is the handle's
	h, err := s.Open(keys[0])
	require.NoError(t, err)
	pinned := s.sessionOf(keys[0])
	runOnce(t, s, keys[0])
	for i := 1; i < len(keys); i += 100 {
		runOnce(t, s, keys[i:min(i+100, len(keys))]...)
	}
	require.Same(t, pinned, s.sessionOf(keys[0]), "the pinned session was dropped")
	require.Equal(t, s.idleCap, checkIdleLists(t, s), "a pinned session is no idle record")
	require.NoError(t, h.Close(context.Background()))
	require.Nil(t, s.sessionOf(keys[0]))

	// Opening a key that has an idle record takes the record off the list.
	sh.mu.Lock()
	newest := sh.idleHead.key
	sh.mu.Unlock()
	h, err = s.Open(newest)
	require.NoError(t, err)
	require.Equal(t, s.idleCap-1, checkIdleLists(t, s))
	runOnce(t, s, newest)
	require.Equal(t, s.idleCap-1, checkIdleLists(t, s))
	require.NoError(t, h.Close(context.Background()))
}
