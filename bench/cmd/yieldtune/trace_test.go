package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sampleTrace = "sample-trace.csv"

func TestParseTraceReadsRowsInOrderOfOffset(t *testing.T) {
	in := `# a comment, then the optional header
Offset, Session, Priority, Work, Sleep

2ms,bob,normal,100us,0
1ms,alice,HIGH,1.5ms,2ms
2ms,alice,normal,0,500us
1ms,carol,normal,50µs,0s
`
	tr, err := parseTrace(strings.NewReader(in))
	require.NoError(t, err)
	us := time.Microsecond
	assert.Equal(t, []string{"bob", "alice", "carol"}, tr.sessions, "in order of first appearance")
	assert.Equal(t, []traceTask{
		{at: time.Millisecond, session: 1, high: true, work: 1500 * us, sleep: 2 * time.Millisecond},
		{at: time.Millisecond, session: 2, work: 50 * us},
		{at: 2 * time.Millisecond, session: 0, work: 100 * us},
		{at: 2 * time.Millisecond, session: 1, sleep: 500 * us},
	}, tr.tasks, "by offset; equal offsets in file order")
}

func TestParseTraceWithoutAHeader(t *testing.T) {
	tr, err := parseTrace(strings.NewReader("0s,a,normal,1ms,0\n"))
	require.NoError(t, err)
	assert.Len(t, tr.tasks, 1)
}

// Every bad row is refused with its line number and what is wrong, as an
// error that errors.Is errBadTrace.
func TestParseTraceRefusesBadRowsWithTheirLine(t *testing.T) {
	const head = "offset,session,priority,work,sleep\n0s,a,normal,1ms,0\n"
	for name, tc := range map[string]struct{ in, want string }{
		"too few fields": {head + "1ms,a,normal,1ms\n", "line 3: 4 fields; want 5: " +
			"offset,session,priority,work,sleep"},
		"too many fields": {head + "1ms,a,normal,1ms,0,x\n", "line 3: 6 fields; want 5"},
		"offset not a time": {head + "\n# " +
			"comment\nsoon,a,normal,1ms,0\n", `line 5: offset "soon": not a duration (like 1.5ms or 200us)`},
		"offset negative":   {head + "-1ms,a,normal,1ms,0\n", "line 3: offset -1ms: must not be negative"},
		"offset over a day": {head + "25h,a,normal,1ms,0\n", "line 3: offset 25h0m0s: must be at most 24h0m0s"},
		"no session":        {head + "1ms, ,normal,1ms,0\n", "line 3: session is empty"},
		"bad priority":      {head + "1ms,a,urgent,1ms,0\n", `line 3: priority "urgent": must be high or normal`},
		"work not a time":   {head + "1ms,a,normal,lots,0\n", `line 3: work "lots": not a duration`},
		"work too long":     {head + "1ms,a,normal,2m,0\n", "line 3: work 2m0s: must be at most 1m0s"},
		"sleep negative":    {head + "1ms,a,normal,1ms,-2ms\n", "line 3: sleep -2ms: must not be negative"},
		"sleep missing":     {head + "1ms,a,normal,1ms,\n", `line 3: sleep "": not a duration`},
		"bare quote":        {head + "1ms,a\"b,normal,1ms,0\n", `line 3: bare " in non-quoted-field`},
		"header later":      {head + "offset,session,priority,work,sleep\n", `line 3: offset "offset": not a duration`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseTrace(strings.NewReader(tc.in))
			require.Error(t, err)
			assert.True(t, errors.Is(err, errBadTrace), "%v", err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "error %q; want %q", err, tc.want)
		})
	}
}

func TestParseTraceRefusesATraceWithNoTasks(t *testing.T) {
	for _, in := range []string{"", "offset,session,priority,work,sleep\n", "# only a comment\n\n"} {
		_, err := parseTrace(strings.NewReader(in))
		assert.ErrorIs(t, err, errBadTrace, "%q", in)
		assert.EqualError(t, err, "no tasks: bad trace", "%q", in)
	}
}

// The sample shipped with the tool parses, and says what it is.
func TestSampleTraceParses(t *testing.T) {
	f, err := os.Open(sampleTrace)
	require.NoError(t, err)
	defer f.Close()
	tr, err := parseTrace(f)
	require.NoError(t, err)
	assert.Len(t, tr.tasks, 1000)
	assert.Len(t, tr.sessions, 24)
}

// A bad trace ends the run before it starts: one line naming the file and
// the row, exit code 2, as for a bad flag.
func TestRunRefusesABadTraceWithExitCode2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.csv")
	require.NoError(t, os.WriteFile(path, []byte("0s,a,normal,1ms,0\n1ms,b,low,1ms,0\n"), 0o644))
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"-trace", path}, &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Equal(t, "yieldtune: -trace "+path+`: line 2: priority "low": must be high or normal`+"\n", stderr.String())

	stderr.Reset()
	missing := filepath.Join(t.TempDir(), "none.csv")
	assert.Equal(t, 2, run(context.Background(), []string{"-trace", missing}, &stdout, &stderr))
	assert.Equal(t, "yieldtune: -trace "+missing+": open "+missing+": no such file or directory\n", stderr.String())
}

// -objective high-p99 needs High tasks: a trace without them is refused
// before the run, like a bad flag.
func TestRunRefusesHighWaitObjectiveForATraceWithoutHighTasks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.csv")
	require.NoError(t, os.WriteFile(path, []byte("0s,a,normal,1ms,0\n1ms,b,normal,1ms,0\n"), 0o644))
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"-trace", path, "-objective", "high-p99"}, &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Equal(t, "yieldtune: -objective high-p99: the trace "+path+" has no High tasks (see -h)\n", stderr.String())
}

// A trace is replayed as recorded: each task at its offset, to its
// session, with its priority, work and sleep.
func TestReplaySubmitsTheTraceAsRecorded(t *testing.T) {
	tr, err := parseTrace(strings.NewReader("0s,a,normal,0,1ms\n2ms,b,high,0,0\n5ms,a,normal,0,3ms\n"))
	require.NoError(t, err)
	ld := replay(tr)
	assert.Equal(t, load{sessions: 2, producers: 1, jobs: []job{
		{at: 0, session: 0, sleep: time.Millisecond},
		{at: 2 * time.Millisecond, session: 1, high: true},
		{at: 5 * time.Millisecond, session: 0, sleep: 3 * time.Millisecond},
	}}, ld)
}

// The sample trace runs end to end: the output names it and what it holds.
func TestRunReplaysTheSampleTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 1,000 tasks per run; TestReplaySubmitsTheTraceAsRecorded covers the replay")
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-trace", sampleTrace, "-rounds", "3", "-from", "10", "-to", "50", "-step", "40", "-no-progress"}
	require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr), stderr.String())
	assert.Contains(t, stdout.String(), "load: trace sample-trace.csv: 1000 tasks, 24 sessions, mean work ")
	assert.Contains(t, stdout.String(), "\nrecommendation: ")
}
