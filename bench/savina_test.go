package bench_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched/bench"
)

// The Savina subset (bench/savina*.go): one benchmark per workload and
// system, named workload=…/impl=… for benchstat -col /impl; one op is one
// Savina iteration, the system made and closed included. Under -short the
// sizes are about a hundredth of Savina's; every check still runs.

func BenchmarkSavina(b *testing.B) {
	for _, w := range bench.SavinaSuite(testing.Short()) {
		for _, sys := range bench.SavinaSystems() {
			b.Run(fmt.Sprintf("workload=%s/impl=%s", w.Name, sys.Name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := w.Run(sys.New); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w.Msgs), "ns/msg")
			})
		}
	}
}

func TestSavinaWorkloadsPassTheirChecksOnEverySystem(t *testing.T) {
	for _, w := range bench.SavinaSuite(true) {
		for _, sys := range bench.SavinaSystems() {
			if err := w.Run(sys.New); err != nil {
				t.Errorf("%s on %s: %v", w.Name, sys.Name, err)
			}
		}
	}
}

// dupActors delivers the dup-th message sent twice: a system that breaks
// exactly-once delivery, which the checks must catch.
type dupActors struct {
	bench.Actors
	n, dup int
}

func (d *dupActors) Send(to int, m bench.Task) {
	if d.n++; d.n == d.dup {
		d.Actors.Send(to, m)
	}
	d.Actors.Send(to, m)
}

func TestSavinaChecksCatchADuplicatedMessage(t *testing.T) {
	// Only workloads whose sends all come from one goroutine, so that
	// the counter in dupActors needs no lock, and whose protocol ends
	// anyway with one message too many.
	dup := func(n int) bench.Actors {
		return &dupActors{Actors: bench.NewSeqschedActors(n), dup: 7}
	}
	if err := bench.Count(dup, 100); err == nil || !strings.Contains(err.Error(), "saw 101; want 100") {
		t.Errorf("count with a message delivered twice: err = %v; want the counter's 101", err)
	}
	if err := bench.FJThroughput(dup, 3, 10); err == nil || !strings.Contains(err.Error(), "ran 11 messages") {
		t.Errorf("fjthrput with a message delivered twice: err = %v; want an actor that ran 11", err)
	}
}

func TestBankingCatchesAWrongBalance(t *testing.T) {
	ts := bench.Transfers(10, 50)
	// The same transfers, one of them applied with the wrong amount on
	// one side only: the ledger no longer matches the transfers.
	wrong := func(n int) bench.Actors { return &skewActors{Actors: bench.NewSeqschedActors(n)} }
	if err := bench.Banking(wrong, 10, ts); err == nil || !strings.Contains(err.Error(), "banking: account") {
		t.Errorf("banking with a credit run twice: err = %v; want a balance that differs", err)
	}
	if err := bench.Banking(bench.NewSeqschedActors, 10, ts); err != nil {
		t.Errorf("banking on seqsched: %v", err)
	}
}

// skewActors runs the first request twice: one account credited twice.
type skewActors struct {
	bench.Actors
	asked atomic.Bool
}

func (s *skewActors) Ask(ctx context.Context, to int, m bench.Task) {
	if s.asked.CompareAndSwap(false, true) {
		s.Actors.Ask(ctx, to, m)
	}
	s.Actors.Ask(ctx, to, m)
}

var savinaTable = flag.Int("savina.reps", 0,
	"TestSavinaTable: run the Savina subset this many interleaved times and print the summary table (0: skip)")

// TestSavinaTable prints the Savina summary: for each workload, every
// system runs once per repetition, after a GC, in an order that rotates
// from one repetition to the next, and the table gives each system's median time
// and the median of the per-repetition ratios seqsched / peer (below 1:
// seqsched is faster). It fails if any run's check fails. Run it with
// -savina.reps N (bench/run.sh does).
func TestSavinaTable(t *testing.T) {
	reps := *savinaTable
	if reps <= 0 {
		t.Skip("needs -savina.reps N")
	}
	if raceEnabled {
		t.Skip("timings under -race say nothing")
	}
	systems := bench.SavinaSystems()
	var lines []string
	lines = append(lines, "| workload | size | msgs | seqsched | protoactor | naive-chan | seqsched / protoactor | seqsched / naive-chan |",
		"|---|---|---|---|---|---|---|---|")
	for _, w := range bench.SavinaSuite(testing.Short()) {
		times := make([][]time.Duration, len(systems))
		ratios := make([][]float64, len(systems))
		for r := range reps {
			d := make([]time.Duration, len(systems))
			for k := range systems {
				i := (r + k) % len(systems)
				// The garbage of the run before is collected now, not
				// in this one's time: seqsched's count leaves 112 MB.
				runtime.GC()
				start := time.Now()
				if err := w.Run(systems[i].New); err != nil {
					t.Fatalf("%s on %s: %v", w.Name, systems[i].Name, err)
				}
				d[i] = time.Since(start)
				times[i] = append(times[i], d[i])
			}
			for i := range systems {
				ratios[i] = append(ratios[i], float64(d[0])/float64(d[i]))
			}
		}
		cells := []string{w.Name, w.Size, fmt.Sprint(w.Msgs)}
		for i := range systems {
			cells = append(cells, medianDuration(times[i]).Round(100*time.Microsecond).String())
		}
		for i := 1; i < len(systems); i++ {
			lo, med, hi := spreadOfRatios(ratios[i])
			cells = append(cells, fmt.Sprintf("**%.2f×** (%.2f–%.2f)", med, lo, hi))
		}
		lines = append(lines, "| "+strings.Join(cells, " | ")+" |")
	}
	// The table goes to stdout as it is, for BENCHMARKS.md.
	fmt.Printf("Savina subset, GOMAXPROCS=%d, %d interleaved repetitions; times are medians, ratios the median "+
		"(and range) of seqsched / peer per repetition, below 1 when seqsched is faster:\n\n%s\n\n",
		runtime.GOMAXPROCS(0), reps, strings.Join(lines, "\n"))
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func spreadOfRatios(rs []float64) (lo, med, hi float64) {
	s := slices.Clone(rs)
	slices.Sort(s)
	return s[0], s[len(s)/2], s[len(s)-1]
}
