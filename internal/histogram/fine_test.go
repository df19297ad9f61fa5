package histogram

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestFineBoundsAreAtMostAnEighthWideAndIncludeBounds(t *testing.T) {
	for i := 1; i < len(fineBounds); i++ {
		lo, hi := fineBounds[i-1], fineBounds[i]
		if hi <= lo {
			t.Fatalf("fineBounds[%d] = %d after %d: not ascending", i, hi, lo)
		}
		// The least duration in bucket i is lo+1; it is reported as hi.
		if float64(hi) > 1.125*float64(lo+1) {
			t.Errorf("bucket (%d, %d]: %.3f wide; want <= 1.125", lo, hi, float64(hi)/float64(lo+1))
		}
	}
	for _, b := range Bounds {
		if _, ok := slices.BinarySearch(fineBounds, b); !ok {
			t.Errorf("bound %d of Bounds is no bound of fineBounds", b)
		}
	}
	if last := fineBounds[len(fineBounds)-1]; last != 1e18 {
		t.Errorf("last fine bound = %d; want 1e18", last)
	}
}

// A Fine's coarse buckets are exactly a Recorder's, and its quantiles are
// within an eighth above the true ones, for durations of every scale.
func TestFineCountsAsARecorderAndAnswersQuantiles(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	f, r := NewFine(), new(Recorder)
	var all []time.Duration
	for range 20000 {
		d := time.Duration(rng.Int64N(1 << rng.IntN(60)))
		if rng.IntN(50) == 0 {
			d = -d
		}
		f.Observe(d)
		r.Observe(d)
		all = append(all, max(d, 0))
	}
	s := f.Snapshot()
	count, sum, buckets := r.Snapshot()
	if s.Count != count || s.Sum != sum || s.Buckets() != buckets {
		t.Fatalf("Fine: count %d sum %v buckets %v; Recorder: %d %v %v", s.Count, s.Sum, s.Buckets(), count, sum, buckets)
	}
	slices.Sort(all)
	if s.Max != all[len(all)-1] {
		t.Errorf("Max = %v; want %v", s.Max, all[len(all)-1])
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 1} {
		rank := max(int(q*float64(len(all))+0.5), 1)
		want := all[rank-1]
		got := s.Quantile(q)
		if got < want || float64(got) > 1.125*float64(want) && got-want > 1 {
			t.Errorf("Quantile(%v) = %v; want %v to %v", q, got, want, time.Duration(1.125*float64(want)))
		}
	}
}

func TestFineOfNothingIsZero(t *testing.T) {
	s := NewFine().Snapshot()
	if s.Count != 0 || s.Quantile(0.5) != 0 || s.Max != 0 || s.Buckets() != [Buckets]uint64{} {
		t.Fatalf("empty Fine: %+v", s)
	}
}
