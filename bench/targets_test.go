package bench_test

import (
	"flag"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seqsched/seqsched/bench"
)

var strictTargets = flag.Bool("targets.strict", false,
	"fail on the known misses listed in knownMiss too")

// knownMiss lists the targets this version of seqsched is known to miss on
// the reference machine, with the reason; BENCHMARKS.md has the numbers and
// profiles. They are still measured and printed as XMISS; they fail only
// with -targets.strict, which is how a fix is verified (and the entry then
// removed). Any target not listed here that misses fails the test. Targets
// themselves are never changed here.
var knownMiss = map[string]string{
	"roundtrip: seqsched-await / floor-goroutine": "near parity: 1.37-1.45x over 7 quiet runs, 1.25-1.43x over 45 loaded ones (passing in 26); a shard lock on each side and a 112-byte task around the spawn (128 before core v4)",
	"many s=1000 p=2: seqsched / naive-chan":      "no allocation and a parked goroutine per key: ~60 ns a task, under the ~82 ns of a seqsched task's primitives; a build with no allocation and no WaitGroup per task still measured 1.7x",
	"many s=100000 p=2: seqsched / pkgz-pool":     "near parity: 0.66-1.68x from run to run; 2 fixed workers: no session to start, no map",
	// Core v2's paths (BENCHMARKS.md, "Session handles and Post").
	"stream: seqsched-hpost / floor-chan-alloc":    "target 1.15x since issue 47 (1.3x before): 1.07-1.22x over 7 quiet runs (met in 2), 0.96-1.62x over 6 loaded ones: at GOMAXPROCS=1 a handle Post task is 1.26x the floor's instructions (981 against 777 since the harness keeps a producer's handle; 1,011 when it looked each task's handle up: the allocation, the producer's lock section, the worker's claim and steps); on 2 cores the floor's consumer wake-ups hide part of that, so the ratio swings with which side keeps up",
	"stream: seqsched-hgo / floor-chan-alloc":      "target 1.25x since issue 47 (1.3x before): 1.13-1.40x over 7 quiet runs (met in 4), 1.14-1.67x over 6 loaded ones: as for seqsched-hpost, plus the future's WaitGroup and its publication",
	"stream: seqsched-hpost / protoactor":          "protoactor's mailbox allocates nothing per message; a task allocates once, by decision (BENCHMARKS.md, Targets)",
	"stream: seqsched-hgo / protoactor":            "as for seqsched-hpost",
	"roundtrip: seqsched-hgo / floor-goroutine":    "the same path as Go by key plus a future: 1.30-1.44x over 7 quiet runs, 1.6-2.1x loaded",
	"many s=1000 p=2: seqsched-post / naive-chan":  "1 allocation and a session activation (a shard lock, a live token) per task; naive-chan has a parked goroutine per key",
	"many s=100000 p=2: seqsched-post / pkgz-pool": "as for seqsched: 2 fixed workers, no session to start, no map",
	// Core v4's targets (issue 47): met in most quiet runs, not in every one
	// (medians of 31; BENCHMARKS.md, Targets).
	"roundtrip P=1: seqsched-hgo / floor-goroutine-alloc": "1.29x in instructions (4,165 against 3,218) since issue 47's " +
		"second round: two shard lock sections, the guard's deferred frames, Await's parker and the future's two " +
		"pointer atomics; 1.14-1.31x over 7 quiet runs (met in 6), 1.40-1.53x loaded",
	"roundtrip P=2: seqsched-hgo / floor-goroutine-alloc": "1.20-1.45x over 7 quiet runs (met in 6), 1.42-1.71x loaded: as at GOMAXPROCS=1",
	"roundtrip P=1: seqsched-await / floor-goroutine-alloc": "1.34x in instructions (4,255 against 3,177) since " +
		"the idle list is kept as a clock again; 1.26-1.32x over 3 quiet runs then (met in 2), 1.16-1.36x over 7 " +
		"before (met in 5), 1.44-1.88x loaded: as for seqsched-hgo, plus the shard's hash and the map's lookup by key",
	"roundtrip P=2: seqsched-await / floor-goroutine-alloc": "1.13-1.41x over 7 quiet runs (met in 6), 1.45-1.75x loaded: as at GOMAXPROCS=1",
	"many s=1000 p=2: seqsched-post / naive-chan (v4)": "1.82, 2.00x over 2 quiet runs since the idle list is " +
		"kept as a clock through every move (1,171 instructions a task against 845 at GOMAXPROCS=1), 2.11-2.73x over 7 " +
		"quiet runs before (met in 2), 2.8-4.3x loaded: one allocation and a session activation per task against a " +
		"parked goroutine's channel send",
}

// TestTargets is the suite's pass/fail summary: the performance targets
// (allocations, goroutines, idle heap, and ratios to the floors, the naive
// designs and the peers), measured side by side in this run.
//
// Exact checks (allocations per task, goroutines retained, idle heap) are
// strict in every mode, and so are the wake-up workloads' ratios to
// naive-chan (see wakeTargets). Timing checks (stream, roundtrip and many ratios,
// High start latency) compare interleaved repetitions and take the median
// ratio; they are strict in the full run and report-only under -short,
// which is what CI runs on a shared 2-core machine. See BENCHMARKS.md.
func TestTargets(t *testing.T) {
	if raceEnabled {
		t.Skip("targets are measured without -race: the detector changes costs and allocations")
	}
	short := testing.Short()
	var report []string
	check := func(name string, got, limit float64, unit string, timing bool, notes ...string) {
		t.Helper()
		ok := got <= limit
		verdict := "PASS"
		if !ok {
			verdict = "MISS"
		}
		why, known := knownMiss[name]
		if !ok && known {
			verdict = "XMISS"
		}
		line := fmt.Sprintf("%-5s %-56s %10.3f %-10s target <= %.3f", verdict, name, got, unit, limit)
		for _, n := range notes {
			line += "  (" + n + ")"
		}
		switch {
		case ok && known:
			line += "  (listed in knownMiss but met: remove the entry)"
		case ok:
		case known && !*strictTargets:
			line += "  (known: " + why + ")"
		case timing && short:
			line += "  (timing: report-only under -short)"
		default:
			t.Errorf("%s: got %.3f %s, want <= %.3f", name, got, unit, limit)
		}
		report = append(report, line)
	}
	defer func() {
		mode := "full (all strict)"
		if short {
			mode = "-short (timing report-only)"
		}
		t.Logf("targets, GOMAXPROCS=%d, mode %s:\n%s", runtime.GOMAXPROCS(0), mode, strings.Join(report, "\n"))
	}()
	// info prints a figure that is no target, next to the targets.
	info := func(name string, got float64, unit string) {
		report = append(report, fmt.Sprintf("%-5s %-56s %10.3f %-10s (no target)", "INFO", name, got, unit))
	}
	// allocCheck applies "≤ 1 allocation per task" the way go test
	// -benchmem counts allocs/op: whole allocations per task. What the
	// runtime allocates per session start (a goroutine, a sudog, a session
	// after a GC emptied the pool) is a fraction of an allocation per task
	// and is printed; a second allocation per task fails.
	allocCheck := func(name string, perTask float64) {
		t.Helper()
		check(name, math.Floor(perTask), 1, "allocs", false, fmt.Sprintf("measured %.4f per task", perTask))
	}
	reps := 31
	if short {
		reps = 11
	}

	// Wake-ups first, while the runtime's first goroutine stack is still
	// its default (see startingStack).
	wakeTargets(check, info, reps)

	// roundtrip ≤ 1.3× the goroutine floor, through the future (Await).
	seqRT, seqRTImpl := roundTripTimer(bench.NewSeqschedAwait)
	floorRT, floorRTImpl := roundTripTimer(bench.NewFloorGoroutine)
	check("roundtrip: seqsched-await / floor-goroutine", medianRatio(reps, seqRT, floorRT), 1.3, "x", true)
	seqRTImpl.Close()
	floorRTImpl.Close()

	// ≤ 1 allocation per task (exact: counted, not timed), with futures
	// left alone and with every future awaited.
	for _, v := range []struct {
		label string // after the workload's name
		mk    func() bench.Impl
	}{
		{"", bench.NewSeqsched},
		{" (await)", bench.NewSeqschedAwait},
	} {
		impl := v.mk()
		p, c := bench.NewProducer(impl), bench.NewCounter()
		allocCheck("allocs/task: stream"+v.label, allocsPerTask(streamN, func() { bench.Stream(p, c, streamN) }))
		allocCheck("allocs/task: roundtrip"+v.label, allocsPerTask(1000, func() {
			for range 1000 {
				bench.RoundTrip(impl)
			}
		}))
		impl.Close()
	}

	// many: faster than every peer and naive, 0 goroutines left when idle.
	manyReps := 9
	sessionsList := []int{1_000, 100_000}
	if short {
		manyReps = 3
	}
	for _, sessions := range sessionsList {
		for _, np := range ManyProducers() {
			n := ManyTasks(sessions)
			// A repetition runs at least 100,000 tasks (10 operations at
			// 1,000 sessions, ~15 ms), so that a GC cycle or a stall of a
			// millisecond or two is spread over it instead of deciding it.
			opsPerRep := max(1, 100_000/n)
			base := runtime.NumGoroutine()
			seq, seqImpl := manyTimer(bench.NewSeqsched, np, sessions, n, opsPerRep)
			allocCheck(fmt.Sprintf("allocs/task: many s=%d p=%d", sessions, np), allocsPerTask(opsPerRep*n, func() { seq() }))
			check(fmt.Sprintf("goroutines idle: many s=%d p=%d", sessions, np), float64(bench.Settle(base)), 0, "goroutines", false)
			for _, mk := range bench.Keyed() {
				if strings.HasPrefix(mk.Name, "seqsched") {
					continue
				}
				other, otherImpl := manyTimer(mk.New, np, sessions, n, opsPerRep)
				r := medianRatio(manyReps, seq, other)
				otherImpl.Close()
				// "Faster than" is a strict inequality: the ratio must be < 1.
				check(fmt.Sprintf("many s=%d p=%d: seqsched / %s", sessions, np, mk.Name), r, nextBelow1, "x", true)
			}
			seqImpl.Close()
		}
	}

	// Core v2's paths: handles and Post.
	v2Targets(check, allocCheck, info, reps, manyReps, sessionsList)

	// Core v4's round trips (issue 47), against the one-allocation floor,
	// and the round trip under CPU load.
	roundTripTargets(check, info, reps)
	if trap := cpuLoadTargets(check, info, reps); trap <= cpuLoadLimit && !short {
		t.Errorf("cpu load: the Gosched trap measured %.3fx, within the target (%.0fx): the check would not catch it",
			trap, cpuLoadLimit)
	}

	// High p99 start latency with 10,000 queued Normal tasks ≤ 2 task-durations.
	{
		impl := bench.NewSeqsched()
		r := bench.Mixed(impl, MixedQueued, 200, MixedTask)
		impl.Close()
		p99 := bench.Percentile(r.High, 99)
		check(fmt.Sprintf("mixed: High p99 start / task (%s)", MixedTask), float64(p99)/float64(MixedTask), 2, "tasks", true)
	}

	// idle: ≤ 8 MiB heap and 0 extra goroutines after 1,000,000 keys.
	{
		r := bench.Idle(bench.Maker{Name: "seqsched", New: bench.NewSeqsched}, 1_000_000)
		check("idle 1M keys: heap", float64(r.HeapBytes)/(1<<20), 8, "MiB", false)
		check("idle 1M keys: goroutines", float64(r.Goroutines), 0, "goroutines", false)
	}
}

// nextBelow1 is the largest float64 below 1: "ratio <= nextBelow1" is
// "ratio < 1".
var nextBelow1 = 1 - 1.0/(1<<53)

// medianRatio runs a and b reps times, alternating which goes first, and
// returns the median of the per-repetition ratios a/b. Interleaving exposes
// both sides to the same machine noise; the median drops outliers.
func medianRatio(reps int, a, b func() time.Duration) float64 {
	rs := make([]float64, 0, reps)
	for i := range reps {
		var da, db time.Duration
		if i%2 == 0 {
			da, db = a(), b()
		} else {
			db, da = b(), a()
		}
		rs = append(rs, float64(da)/float64(db))
	}
	slices.Sort(rs)
	return rs[len(rs)/2]
}

// allocsPerTask counts heap allocations of op (the whole process, consumers
// included) over several runs, per task.
func allocsPerTask(tasksPerOp int, op func()) float64 {
	const runs = 5
	op()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range runs {
		op()
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.Mallocs-m0.Mallocs) / float64(runs*tasksPerOp)
}

// v2Targets checks the targets of core v2 (session handles and Post),
// measured side by side with the floors and peers in this run.
func v2Targets(check func(string, float64, float64, string, bool, ...string), allocCheck func(string, float64),
	info func(string, float64, string), reps, manyReps int, sessionsList []int) {
	// stream through a handle ≤ 1.15× (Post) and ≤ 1.25× (Go) the
	// one-allocation floor (core v4's targets, issue 47; core v2's were
	// 1.3× for both): a buffered
	// channel of pointers to freshly allocated 128-byte nodes. A task
	// allocates once by design (BENCHMARKS.md, "Targets": a posted task's
	// node is its ctx, which must stay done after the task), so the floor
	// that allocates nothing is not the reference; allocations are checked
	// exactly instead, at 1 per task.
	floor, floorImpl, _ := streamTimer(bench.NewFloorChanAlloc)
	proto, protoImpl, _ := streamTimer(bench.NewProtoactor)
	for _, v := range []struct {
		name  string
		mk    func() bench.Impl
		limit float64
	}{
		{"seqsched-hpost", bench.NewSeqschedHandlePost, 1.15},
		{"seqsched-hgo", bench.NewSeqschedHandleGo, 1.25},
	} {
		op, impl, p := streamTimer(v.mk)
		check("stream: "+v.name+" / floor-chan-alloc", medianRatio(reps, op, floor), v.limit, "x", true)
		check("stream: "+v.name+" / protoactor", medianRatio(reps, op, proto), nextBelow1, "x", true)
		c := bench.NewCounter()
		allocCheck("allocs/task: stream ("+v.name+")", allocsPerTask(streamN, func() { bench.Stream(p, c, streamN) }))
		impl.Close()
	}
	// Go by key has no stream target of its own (it adds a hash and a map
	// lookup to seqsched-hgo); its ratio is printed for comparison.
	keyed, keyedImpl, _ := streamTimer(bench.NewSeqsched)
	info("stream: seqsched / floor-chan-alloc", medianRatio(reps, keyed, floor), "x")
	keyedImpl.Close()
	floorImpl.Close()
	protoImpl.Close()

	hrt, hImpl := roundTripTimer(bench.NewSeqschedHandleGo)
	grt, gImpl := roundTripTimer(bench.NewFloorGoroutine)
	prt, pImpl := roundTripTimer(bench.NewProtoactor)
	check("roundtrip: seqsched-hgo / floor-goroutine", medianRatio(reps, hrt, grt), 1.25, "x", true)
	check("roundtrip: seqsched-hgo / protoactor", medianRatio(reps, hrt, prt), nextBelow1, "x", true)
	hImpl.Close()
	gImpl.Close()
	pImpl.Close()

	for _, sessions := range sessionsList {
		for _, np := range ManyProducers() {
			n := ManyTasks(sessions)
			opsPerRep := max(1, 100_000/n)
			post, postImpl := manyTimer(bench.NewSeqschedPost, np, sessions, n, opsPerRep)
			for _, mk := range bench.Keyed() {
				if strings.HasPrefix(mk.Name, "seqsched") {
					continue
				}
				other, otherImpl := manyTimer(mk.New, np, sessions, n, opsPerRep)
				r := medianRatio(manyReps, post, other)
				otherImpl.Close()
				check(fmt.Sprintf("many s=%d p=%d: seqsched-post / %s", sessions, np, mk.Name), r, nextBelow1, "x", true)
				if sessions == 1_000 && mk.Name == "naive-chan" {
					// Core v4's step towards it (issue 47).
					check(fmt.Sprintf("many s=%d p=%d: seqsched-post / %s (v4)", sessions, np, mk.Name), r, 2.2, "x", true)
				}
			}
			postImpl.Close()
		}
	}
}

// roundTripTargets checks core v4's round-trip targets (issue 47): a
// handle's Go and Await, and Submit and Await by key, ≤ 1.3× the
// one-allocation round-trip floor at GOMAXPROCS=1 and ≤ 1.4× at 2. That
// floor (a goroutine, a WaitGroup and one 128-byte allocation) pays what a
// seqsched round trip cannot avoid, so the ratio is the scheduler's own
// cost; next to it, the floor's ratio to floor-goroutine (24 bytes) is
// what the allocation's size costs, printed.
func roundTripTargets(check func(string, float64, float64, string, bool, ...string),
	info func(string, float64, string), reps int) {
	for _, at := range []struct {
		procs int
		limit float64
	}{{1, 1.3}, {2, 1.4}} {
		prev := runtime.GOMAXPROCS(at.procs)
		alloc, allocImpl := roundTripTimer(bench.NewFloorGoroutineAlloc)
		spawn, spawnImpl := roundTripTimer(bench.NewFloorGoroutine)
		for _, v := range []struct {
			name string
			mk   func() bench.Impl
		}{
			{"seqsched-hgo", bench.NewSeqschedHandleGo},
			{"seqsched-await", bench.NewSeqschedAwait},
		} {
			op, impl := roundTripTimer(v.mk)
			check(fmt.Sprintf("roundtrip P=%d: %s / floor-goroutine-alloc", at.procs, v.name),
				medianRatio(reps, op, alloc), at.limit, "x", true)
			impl.Close()
		}
		info(fmt.Sprintf("roundtrip P=%d: floor-goroutine-alloc / floor-goroutine", at.procs),
			medianRatio(reps, alloc, spawn), "x")
		allocImpl.Close()
		spawnImpl.Close()
		runtime.GOMAXPROCS(prev)
	}
}

// cpuLoadLimit is the round trip's p99 under CPU load, as a multiple of
// floor-goroutine's p99 under the same load. Blocking waits measure a few
// times the floor (microseconds: how often the OS takes the thread away on
// a loaded machine decides most of it; see BENCHMARKS.md); a wait that
// gives its P to a CPU-bound goroutine (the Gosched trap) waits out the
// runtime's preemption quantum, about 10 ms, tens of thousands of times
// the floor. Core v3 measured 2.5-3.7x (medians of 31); the limit leaves
// it room for a loaded machine and sits three orders of magnitude below
// the trap.
const cpuLoadLimit = 20.0

// cpuLoadTargets checks the round trip's p99 latency with a CPU-bound
// goroutine per P (see hogCPU) against floor-goroutine's, at GOMAXPROCS=1
// and 2: a handle's Go and Await, 10,000 round trips a repetition. It
// returns what the same check measures for FloorGosched at GOMAXPROCS=1,
// the Gosched trap, which the caller requires to miss (at 2 the trap
// springs only when the waiter's P holds a CPU-bound goroutine, which the
// runtime's balancing makes a matter of chance).
func cpuLoadTargets(check func(string, float64, float64, string, bool, ...string),
	info func(string, float64, string), reps int) (trap float64) {
	const n = 10_000
	p99 := func(impl bench.Impl, budget time.Duration) func() time.Duration {
		return func() time.Duration {
			stop := hogCPU()
			defer stop()
			return bench.Percentile(loadedRoundTrips(impl, n, budget), 99)
		}
	}
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		floor := bench.NewFloorGoroutine()
		seq := bench.NewSeqschedHandleGo()
		check(fmt.Sprintf("cpu load P=%d: p99 roundtrip seqsched-hgo / floor-goroutine", procs),
			medianRatio(reps, p99(seq, time.Second), p99(floor, time.Second)), cpuLoadLimit, "x", true)
		if procs == 1 {
			// A few repetitions: each takes its 100 ms budget (a dozen
			// round trips of a quantum each).
			gosched := bench.NewFloorGosched()
			trap = medianRatio(3, p99(gosched, 100*time.Millisecond), p99(floor, time.Second))
			info("cpu load P=1: p99 roundtrip floor-gosched / floor-goroutine (must miss)", trap, "x")
			gosched.Close()
		}
		seq.Close()
		floor.Close()
		runtime.GOMAXPROCS(prev)
	}
	return trap
}

// wakeTargets checks the wake-up workloads, where every message wakes an
// idle key: a wake-up copies no stack (exact, see wakeCopies), and
// Savina's pingpong and threadring, timed against protoactor-go and
// naive-chan in this run, stay at core v3's ratios. Per-key control lost
// both (pingpong 6x slower) through frames that grew on the wake-up's
// stack, which the stream and round-trip targets did not see.
func wakeTargets(check func(string, float64, float64, string, bool, ...string),
	info func(string, float64, string), reps int) {
	// The most padding with which no more than half the wake-ups copied
	// their stack (0: not even the least), and the check at wakePad; the
	// scan stops once both are known.
	const wakeN = 200
	var headroom uintptr
	checked, copied := false, false
	for i := 0; i < len(pads) && !(checked && copied); i++ {
		share, padded := wakeCopies(i, wakeN)
		if !checked && padded >= wakePad {
			check(fmt.Sprintf("wake-up: stack copies / wake-up (+%d B)", wakePad), share, 0.5, "copies", false,
				fmt.Sprintf("padded %d B, first stack %d B", padded, startingStack()))
			checked = true
		}
		if share > 0.5 {
			copied = true
		} else if !copied {
			headroom = padded
		}
	}
	info("wake-up: stack headroom (Session.Post)", float64(headroom), "B")

	systems := bench.SavinaSystems()
	for _, w := range bench.SavinaSuite(testing.Short()) {
		limits, ok := wakeLimits[w.Name]
		if !ok {
			continue
		}
		run := func(mk func(int) bench.Actors) func() time.Duration {
			return func() time.Duration {
				runtime.GC() // the run before's garbage is collected outside this one's time
				start := time.Now()
				if err := w.Run(mk); err != nil {
					panic(err)
				}
				return time.Since(start)
			}
		}
		seq := run(systems[0].New)
		for _, sys := range systems[1:] {
			// Against naive-chan the ratio is strict under -short too: both
			// pay per message only, so the short sizes keep core v3's
			// ratios (2.8 and 1.5, against 20 and 10 with a stack copied
			// on every wake-up), and CI's short run catches the next
			// wake-up regression of any cause. protoactor-go's fixed costs
			// dominate its short runs, so that ratio is timed as the rest.
			timing := sys.Name != "naive-chan"
			check(fmt.Sprintf("%s: seqsched / %s", w.Name, sys.Name), medianRatio(reps, seq, run(sys.New)),
				limits[sys.Name], "x", timing)
		}
	}
}

// streamTimer makes mk's implementation and returns an operation that
// times a stream, per task, with the producer it streams through.
func streamTimer(mk func() bench.Impl) (func() time.Duration, bench.Impl, bench.Producer) {
	impl := mk()
	p, c := bench.NewProducer(impl), bench.NewCounter()
	return func() time.Duration {
		const ops = 10
		start := time.Now()
		for range ops {
			bench.Stream(p, c, streamN)
		}
		return time.Since(start) / (ops * streamN)
	}, impl, p
}

// roundTripTimer makes mk's implementation and returns an operation that
// times a round trip.
func roundTripTimer(mk func() bench.Impl) (func() time.Duration, bench.Impl) {
	impl := mk()
	return func() time.Duration {
		const ops = 2000
		start := time.Now()
		for range ops {
			bench.RoundTrip(impl)
		}
		return time.Since(start) / ops
	}, impl
}

// manyTimer makes mk's implementation with np producers and returns an
// operation that times opsPerRep many operations of n tasks over sessions
// keys, per task. It runs the operation once first: sessions, pools and
// maps exist before timing.
func manyTimer(mk func() bench.Impl, np, sessions, n, opsPerRep int) (func() time.Duration, bench.Impl) {
	impl := mk()
	ps := bench.NewProducers(impl, np)
	c := bench.NewCounter()
	op := func() time.Duration {
		start := time.Now()
		for range opsPerRep {
			bench.Many(ps, c, sessions, n)
		}
		return time.Since(start) / time.Duration(opsPerRep*n)
	}
	op()
	return op, impl
}
