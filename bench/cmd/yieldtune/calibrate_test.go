package main

import (
	"bytes"
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On the bubble's clock a task that sleeps 10 ms holds its slot exactly
// that long, so what the slots run is known: 4 slots run 400 tasks/s,
// 2 slots 200, whatever the flags would have estimated.
func TestCalibrateMeasuresWhatTheSlotsRun(t *testing.T) {
	for _, tc := range []struct {
		sessions, maxConc int
		want              float64
	}{{4, 4, 400}, {8, 2, 200}, {4, 0, 400}, {1, 4, 100}} {
		synctest.Test(t, func(t *testing.T) {
			c := config{sessions: tc.sessions, tasks: 10, producers: 2, sleep: 10 * time.Millisecond}
			got, err := calibrate(context.Background(), synthetic(c, 0, 0), tc.maxConc, calWindow)
			require.NoError(t, err)
			assert.InDelta(t, tc.want, got, 1e-9, "%d sessions, max concurrency %d", tc.sessions, tc.maxConc)
		})
	}
}

// Tasks that take no time (here: CPU work, which the bubble's clock does
// not see) have no capacity to pace against.
func TestCalibrateSaysInfiniteForTasksThatTakeNoTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := config{sessions: 2, tasks: 1, producers: 1}
		got, err := calibrate(context.Background(), synthetic(c, 1, 0), 1, calWindow)
		require.NoError(t, err)
		assert.True(t, math.IsInf(got, 1), "got %v", got)
	})
}

// The load is paced by the measured capacity: 4 slots of 10 ms tasks run
// 400 tasks/s, so -load 2 submits 40 tasks over 50 ms, one every 1.25 ms;
// each of the 4 sessions gets a task every 5 ms and runs one every 10, so
// its k-th task waits 5k ms. The output says what was measured.
func TestSweepPacesTheLoadByTheMeasuredCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := parseFlags(
			[]string{"-sessions", "4", "-tasks", "10", "-work", "0", "-sleep", "10ms", "-max-concurrency", "4",
				"-producers", "1", "-load", "2", "-rounds", "3", "-from", "10", "-to", "10",
				"-high", "0", "-raises", "0"},
			&bytes.Buffer{},
		)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, sweep(context.Background(), c, nil, &out, progress{}))
		assert.Contains(t, out.String(), "work 0s, sleep 10ms, High 0%, max concurrency 4, 1 producers, over 50ms\n"+
			"calibration: the slots ran 400 tasks/s (median of 3 timed batches); offered 2.00× that\n"+
			"sweep: 3 rounds × 1 threshold (10), interleaved; about 300ms, and 600ms more to confirm a threshold "+
			"that looks better\n")

		ld := synthetic(c, 0, pace(40, c.load, 400))
		r, err := runOne(context.Background(), ld, 10, c.maxConc, func(int) {})
		require.NoError(t, err)
		for id, s := range r.samples {
			assert.Equal(t, time.Duration(id/4)*5*time.Millisecond, s.wait, "task %d", id)
		}
		assert.Equal(
			t,
			103750*time.Microsecond,
			r.elapsed,
			"session 3's first task arrives at 3.75 ms, its 10 tasks run back to back",
		)
	})
}

func TestPaceSpreadsTasksToOfferLoadTimesCapacity(t *testing.T) {
	assert.Equal(t, time.Second, pace(500, 1.25, 400))
	assert.Equal(t, 50*time.Millisecond, pace(40, 2, 400))
	assert.Zero(t, pace(40, 2, math.Inf(1)), "tasks that take no time: no pacing")
}

// The sweep warns when the slots ran it much slower than the calibration
// said they would: the load offered was then heavier than printed.
func TestDriftWarnsWhenTheMachineSlowedDuringTheSweep(t *testing.T) {
	ms := time.Millisecond
	results := []result{synthResult(10, []float64{700, 790, 900}, []time.Duration{ms, ms, ms})}
	overloaded := plan{capacity: 1000, tasks: 1250, span: time.Second} // offered 1.25×
	assert.Equal(
		t,
		"warning: the sweep ran 790 tasks/s (median of all runs), 79% of the 1000 the calibration promised: "+
			"other work took the machine, so the load was heavier than offered and the spread is wider; run again on "+
			"a quieter machine",
		drift(overloaded, results),
	)
	results[0] = synthResult(10, []float64{700, 800, 900}, []time.Duration{ms, ms, ms})
	assert.Empty(t, drift(overloaded, results), "80% is within the limit")

	underloaded := plan{capacity: 1000, tasks: 500, span: time.Second} // offered 0.5×: expect 500/s
	results[0] = synthResult(10, []float64{480, 500, 510}, []time.Duration{ms, ms, ms})
	assert.Empty(t, drift(underloaded, results))
	results[0] = synthResult(10, []float64{380, 390, 400}, []time.Duration{ms, ms, ms})
	assert.Contains(t, drift(underloaded, results), "78% of the 500 the calibration promised")
	assert.Empty(t, drift(plan{capacity: math.Inf(1)}, results), "tasks that take no time promise nothing")
}

// The sweep also warns when the slots ran it much faster than the
// calibration said they could: the machine was busier while it
// calibrated, so a load offered as an overload may have been none (a
// newcomer's run calibrated at half speed, was raised, and ran at full
// speed with no word said).
func TestDriftWarnsWhenTheSweepRanFasterThanCalibrated(t *testing.T) {
	ms := time.Millisecond
	overloaded := plan{capacity: 1000, tasks: 1500, span: time.Second} // offered 1.5×
	results := []result{synthResult(10, []float64{1900, 2000, 2100}, []time.Duration{ms, ms, ms})}
	assert.Equal(
		t,
		"warning: the sweep ran 2000 tasks/s (median of all runs), 2.00× the 1000 the calibration measured: "+
			"other work had the machine while it calibrated, so the load was lighter than offered (at most 0.75× "+
			"what the slots ran, not 1.50×) "+
			"and the slots may not have been overloaded; run again on a steadier machine",
		drift(overloaded, results),
	)
	results[0] = synthResult(10, []float64{1100, 1250, 1300}, []time.Duration{ms, ms, ms})
	assert.Empty(t, drift(overloaded, results), "1.25× is within the limit")

	atOnce := plan{capacity: 1000, tasks: 1500} // no span: everything submitted at once
	results[0] = synthResult(10, []float64{1300, 1400, 1500}, []time.Duration{ms, ms, ms})
	assert.Contains(
		t,
		drift(atOnce, results),
		"1.40× the 1000 the calibration measured: other work had the machine while it calibrated, so the load was "+
			"lighter than offered and",
	)

	// Underloaded, a sweep runs at the offered rate: it cannot show that
	// the slots could have run faster, and says nothing.
	underloaded := plan{capacity: 1000, tasks: 500, span: time.Second}
	results[0] = synthResult(10, []float64{600, 650, 700}, []time.Duration{ms, ms, ms})
	assert.Empty(t, drift(underloaded, results))
}
