package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// script is a measurer that returns prepared sweeps in turn and records
// what it was asked for.
type script struct {
	sweeps [][]result
	calls  []string // "10,30,50 at 1ms: pass"
}

func (s *script) measure(ld load, ts []int, pass string) ([]result, error) {
	s.calls = append(s.calls, fmt.Sprintf("%s at %v: %q", joinInts(ts), ld.jobs[1].at, pass))
	if len(s.sweeps) == 0 {
		return nil, fmt.Errorf("no sweep left for %v", ts)
	}
	r := s.sweeps[0]
	s.sweeps = s.sweeps[1:]
	return r, nil
}

var twoJobs = load{jobs: []job{{}, {at: time.Millisecond}}, sessions: 1, producers: 1}

func decideConfig(t *testing.T) config {
	c, err := parseFlags([]string{"-rounds", "3", "-from", "10", "-to", "50", "-step", "20"}, &bytes.Buffer{})
	require.NoError(t, err)
	return c
}

// A threshold that passes the rule is measured again with the default
// before it is recommended, and the rule is applied over all the rounds:
// here 30 holds, and the answer rests on six rounds of each.
func TestDecideConfirmsAThresholdBeforeRecommendingIt(t *testing.T) {
	first := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{6 * ms, 7 * ms, 8 * ms}),
		synthResult(50, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
	}
	again := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 12 * ms, 11 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{7 * ms, 6 * ms, 8 * ms}),
	}
	s := &script{sweeps: [][]result{first, again}}
	var w bytes.Buffer
	p := plan{span: time.Second}
	results, j, err := decide(&w, decideConfig(t), twoJobs, &p, []int{10, 30, 50}, s.measure)
	require.NoError(t, err)
	assert.Equal(t, []string{`10, 30, 50 at 1ms: ""`, `10, 30 at 1ms: "confirming 30, "`}, s.calls)
	assert.Equal(
		t,
		"confirm: WithYieldAfter(30) looked better on p99 wait; it and the default ran 3 more rounds, and it held: "+
			"it is recommended\n\n",
		w.String(),
	)
	assert.True(t, j.Changed)
	assert.Equal(t, 30, j.Pick)
	assert.Equal(t, []int{6, 6, 3}, []int{len(results[0].Rounds), len(results[1].Rounds), len(results[2].Rounds)})
	assert.Equal(t, 6, j.Rounds)
	assert.Equal(
		t,
		"the default's p99 wait is 11ms (10ms–12ms) over 6 rounds; 30 better, recommended: 7ms (6ms–8ms), -36%; 50 "+
			"same: 11ms (10ms–12ms) over 3 rounds, 0%",
		j.Why,
	)
}

// A threshold that looked better in one sweep and not over the rounds
// that confirm it is not recommended; the words say why.
func TestDecideKeepsTheDefaultWhenAThresholdDoesNotHold(t *testing.T) {
	first := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{6 * ms, 7 * ms, 8 * ms}),
	}
	again := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{7 * ms, 8 * ms, 9 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{8 * ms, 9 * ms, 10 * ms}),
	}
	s := &script{sweeps: [][]result{first, again}}
	var w bytes.Buffer
	p := plan{span: time.Second}
	_, j, err := decide(&w, decideConfig(t), twoJobs, &p, []int{10, 30}, s.measure)
	require.NoError(t, err)
	assert.Len(t, s.calls, 2)
	assert.Equal(
		t,
		"confirm: WithYieldAfter(30) looked better on p99 wait; it and the default ran 3 more rounds, and it did not "+
			"hold: same over all its rounds\n\n",
		w.String(),
	)
	assert.False(t, j.Changed)
	assert.Equal(t, "keep the default, WithYieldAfter(10): no threshold is better on p99 wait", j.Answer)
	assert.Equal(t, "same", j.verdictCell(30))
}

// Sessions that give way too rarely at the default make decide raise the
// load (its submissions twice as fast) and sweep again; the confirmation
// runs at the raised load.
func TestDecideRaisesTheLoadAndConfirmsAtTheRaisedLoad(t *testing.T) {
	rare := []result{
		withYields(synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}), 50, 5, 50),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{6 * ms, 7 * ms, 8 * ms}),
	}
	good := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{6 * ms, 7 * ms, 8 * ms}),
	}
	s := &script{sweeps: [][]result{rare, good, good}}
	var w bytes.Buffer
	p := plan{capacity: 1000, tasks: 1500, span: time.Second}
	_, j, err := decide(&w, decideConfig(t), twoJobs, &p, []int{10, 30}, s.measure)
	require.NoError(t, err)
	assert.Equal(
		t,
		[]string{`10, 30 at 1ms: ""`, `10, 30 at 500µs: "raised 1 of 2, "`, `10, 30 at 500µs: "confirming 30, "`},
		s.calls,
	)
	assert.Equal(
		t,
		"raised (1 of 2): sessions gave way at the default less than once per 100 tasks in 1 of 3 rounds; the load "+
			"now offers 3.00× what the slots ran\n\n"+
			"confirm: WithYieldAfter(30) looked better on p99 wait; it and the default ran 3 more rounds, and it "+
			"held: it is recommended\n\n",
		w.String(),
	)
	assert.Equal(t, 500*time.Millisecond, p.span)
	assert.Equal(t, 30, j.Pick)
}

func TestMergeAddsRoundsThresholdByThreshold(t *testing.T) {
	a := []result{
		synthResult(10, []float64{1, 2}, []time.Duration{ms, ms}),
		synthResult(30, []float64{3, 4}, []time.Duration{ms, ms}),
	}
	b := []result{
		synthResult(30, []float64{5}, []time.Duration{ms}),
		synthResult(50, []float64{6}, []time.Duration{ms}),
	}
	got := merge(a, b)
	require.Len(t, got, 3)
	assert.Equal(t, []int{10, 30, 50}, thresholdsOf(got))
	assert.Equal(t, spread{Med: 4, Lo: 3, Hi: 5}, got[1].Throughput)
	assert.Len(t, a[1].Rounds, 2, "results are not changed")
}
