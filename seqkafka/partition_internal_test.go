package seqkafka

import (
	"runtime"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func testPartition(t *testing.T) *partition {
	return newPartition(t.Context(), tp{"t", 0}, 1, new(partCounters), 10, 5)
}

// take and done drive a partition as the poll loop and the jobs do.
func (p *partition) takeForTest(o int64) bool {
	if !p.offs.advance(o) {
		return false
	}
	if !p.inheritedDone(o) {
		p.offs.add(o)
	}
	return true
}

func TestPartitionWatermarkSkipsGapsAndWaitsForTheLowest(t *testing.T) {
	p := testPartition(t)
	for _, o := range []int64{5, 6, 9, 10, 11} { // 7 and 8 were never delivered
		if !p.takeForTest(o) {
			t.Fatalf("take(%d) refused", o)
		}
	}
	if p.takeForTest(6) {
		t.Fatal("take(6) again accepted; want a re-delivery refused")
	}
	p.offs.done(6)
	p.offs.done(10)
	// 7 and 8 were never delivered: a commit may pass them, so they merge
	// with 6 into one range.
	if wm, done := p.progress(); wm != 5 || !slices.Equal(done, []OffsetRange{{6, 9}, {10, 11}}) {
		t.Fatalf("progress = %d, %v; want 5, [{6 9} {10 11}]", wm, done)
	}
	p.offs.done(5) // 5, 6 done; 9 not
	if wm, done := p.progress(); wm != 9 || !slices.Equal(done, []OffsetRange{{10, 11}}) {
		t.Fatalf("progress = %d, %v; want 9, [{10 11}]", wm, done)
	}
	p.offs.done(9)
	p.offs.done(11)
	if wm, done := p.progress(); wm != 12 || done != nil || p.offs.pending() != 0 {
		t.Fatalf("progress = %d, %v, pending %d; want 12, [], 0", wm, done, p.offs.pending())
	}
}

// Defect 1's model: the done ranges inherited from the commit metadata
// stay in the progress until they are fetched, and move the watermark
// when nothing below them is pending.
func TestPartitionKeepsInheritedRangesUntilFetched(t *testing.T) {
	p := testPartition(t)
	p.inherited = []OffsetRange{{1, 10}, {12, 14}}
	p.takeForTest(0)
	if wm, done := p.progress(); wm != 0 || !slices.Equal(done, []OffsetRange{{1, 10}, {12, 14}}) {
		t.Fatalf("progress = %d, %v; want 0, [{1 10} {12 14}]", wm, done)
	}
	p.offs.done(0)
	if wm, done := p.progress(); wm != 10 || !slices.Equal(done, []OffsetRange{{12, 14}}) {
		t.Fatalf("progress = %d, %v; want 10, [{12 14}]", wm, done)
	}
	for o := int64(1); o < 12; o++ { // 1..9 skipped, 10 and 11 taken
		p.takeForTest(o)
	}
	if got := p.offs.pending(); got != 2 {
		t.Fatalf("pending = %d; want 2 (10 and 11)", got)
	}
	if wm, done := p.progress(); wm != 10 || !slices.Equal(done, []OffsetRange{{12, 14}}) {
		t.Fatalf("progress = %d, %v; want 10, [{12 14}]", wm, done)
	}
	if wm := p.watermark(); wm != 10 {
		t.Fatalf("watermark = %d; want 10", wm)
	}
}

// Defect 2: records done behind a stuck one cost no memory: tracking holds
// what is not done (bounded by the window), not what was seen.
func TestPartitionTrackingIsBoundedByRecordsNotDone(t *testing.T) {
	p := testPartition(t)
	const n = 300000
	p.takeForTest(0) // stuck
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for o := int64(1); o <= n; o++ {
		p.takeForTest(o)
		p.offs.done(o)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := len(p.offs.list); got > 64 {
		t.Fatalf("tracking holds %d entries for 1 record not done; want a few", got)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 256<<10 {
		t.Fatalf("heap grew by %d bytes for %d done records; want none", grew, n)
	}
	if wm, done := p.progress(); wm != 0 || !slices.Equal(done, []OffsetRange{{1, n + 1}}) {
		t.Fatalf("progress = %d, %v; want 0, [{1 %d}]", wm, done, n+1)
	}
}

// The window grants places in offset order, holds what does not fit, and
// lets a stopped partition fetch again only once nothing waits and at most
// low are taken.
func TestWindowGrantsInOrderAndResumesAtTheLowMark(t *testing.T) {
	w := newWindow(3, 1)
	jobs := make([]*job, 5)
	for i := range jobs {
		jobs[i] = &job{attempt: i}
		w.wait(jobs[i])
	}
	grant := func(want int) {
		t.Helper()
		j := w.next()
		if j == nil || j.attempt != want {
			t.Fatalf("next = %v; want job %d", j, want)
		}
		w.take()
	}
	for i := range 3 {
		grant(i)
	}
	if j := w.next(); j != nil {
		t.Fatalf("next = job %d with the window full; want nil", j.attempt)
	}
	if !w.behind() || w.buffered() != 5 {
		t.Fatalf("behind = %v, buffered = %d; want true, 5", w.behind(), w.buffered())
	}
	w.stopped = true // as the poll loop marks it
	w.release()
	grant(3)
	w.release()
	grant(4)
	if w.behind() || w.resume() {
		t.Fatal("resumed with 3 taken; want only at the low mark (1)")
	}
	w.release()
	if w.resume() {
		t.Fatal("resumed with 2 taken; want only at the low mark (1)")
	}
	w.release()
	if !w.resume() || w.stopped || w.buffered() != 1 {
		t.Fatalf("resume at 1 taken: stopped %v, buffered %d", w.stopped, w.buffered())
	}
	if pollChunk(3, 1) != 1 || pollChunk(1000, 500) != 250 || pollChunk(1, 0) != 1 {
		t.Fatal("pollChunk")
	}
}

// A producer chooses a record's key, up to a record's size; the scheduler
// keeps the keys of idle sessions after their records are done. A long key
// must name its session with a bounded number of bytes, and still name it
// alone: equal keys share a session, different ones do not.
func TestSessionKeyBytesAreBoundedWhateverTheKey(t *testing.T) {
	c := &Consumer{cfg: &config{}}
	p := testPartition(t)
	long := func(last byte) []byte {
		k := make([]byte, 1<<20) // Kafka's default largest record
		k[len(k)-1] = last
		return k
	}
	a1, a2, b := c.sessionKeyOf(p, &kgo.Record{Key: long('a')}), c.sessionKeyOf(p, &kgo.Record{Key: long('a')}), c.sessionKeyOf(p, &kgo.Record{Key: long('b')})
	if len(a1.key) > maxSessionKey {
		t.Fatalf("session key of a 1 MiB key holds %d bytes; want at most %d", len(a1.key), maxSessionKey)
	}
	if a1 != a2 {
		t.Fatal("two records of one long key have different sessions")
	}
	if a1 == b {
		t.Fatal("two long keys differing in their last byte share a session")
	}
	short := c.sessionKeyOf(p, &kgo.Record{Key: []byte(a1.key)}) // a key equal to the long one's hash
	if short == a1 {
		t.Fatal("a short key equal to a long key's hash shares its session")
	}
	edge := make([]byte, maxSessionKey)
	if got := c.sessionKeyOf(p, &kgo.Record{Key: edge}); got.key != string(edge) {
		t.Fatalf("a %d-byte key is named by %q; want its own bytes", maxSessionKey, got.key)
	}
}
