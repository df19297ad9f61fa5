// The session state machine: its table (session.go's edges) is the code
// every move goes through, and docs/maintainers.md draws it. These tests
// check the table's shape and that the drawing is the table; every other
// test binary run checks that no session was sent an event the table has
// no edge for (see movesChecked).

package seqsched_test

import (
	"os"
	"strings"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// drawStateMachine renders the table as the mermaid diagram that
// docs/maintainers.md holds: one line an edge, named after its event.
func drawStateMachine() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n    [*] --> idle: made\n")
	for _, e := range seqsched.Edges() {
		label := e.On
		if e.When != "" {
			label += " (" + e.When + ")"
		}
		b.WriteString("    " + e.From + " --> " + e.To + ": " + label + "\n")
	}
	b.WriteString("    gone --> [*]\n")
	return b.String()
}

func TestMaintainersMapDrawsTheStateMachineTable(t *testing.T) {
	doc, err := os.ReadFile("docs/maintainers.md")
	require.NoError(t, err)
	const open, shut = "```mermaid\n", "```\n"
	_, after, ok := strings.Cut(string(doc), open)
	require.True(t, ok, "docs/maintainers.md has no mermaid block")
	drawn, _, ok := strings.Cut(after, shut)
	require.True(t, ok, "docs/maintainers.md: the mermaid block is not closed")
	want := drawStateMachine()
	if drawn != want {
		t.Errorf("docs/maintainers.md's diagram is not session.go's table; paste this block:\n%s%s%s", open, want, shut)
	}
}

func TestStateMachineReachesEveryStateAndEndsInGone(t *testing.T) {
	out := map[string][]string{}
	for _, e := range seqsched.Edges() {
		out[e.From] = append(out[e.From], e.To)
	}
	reach := func(from string) map[string]bool {
		seen := map[string]bool{from: true}
		for todo := []string{from}; len(todo) > 0; {
			s := todo[0]
			todo = todo[1:]
			for _, to := range out[s] {
				if !seen[to] {
					seen[to] = true
					todo = append(todo, to)
				}
			}
		}
		return seen
	}
	states := []string{"idle", "ready", "running", "held", "paused", "paced", "gone"}
	require.Len(t, reach("idle"), len(states), "states reached from idle")
	for _, s := range states {
		require.True(t, reach(s)["gone"], "%s cannot reach gone", s)
	}
	require.Empty(t, out["gone"], "edges leaving gone")
}

func TestTransitionFollowsTheTableOnly(t *testing.T) {
	type key struct {
		from, on string
		paused   bool
	}
	want := map[key]string{}
	for _, e := range seqsched.Edges() {
		for _, p := range []bool{false, true} {
			if e.When == "paused" && !p || e.When == "not paused" && p {
				continue
			}
			k := key{e.From, e.On, p}
			_, dup := want[k]
			require.False(t, dup, "two edges for %v", k)
			want[k] = e.To
		}
	}
	events := []string{"spawn", "handOver", "queue", "yield", "retire", "hold", "release",
		"pause", "park", "pace", "resume", "admit", "drop", "forget"}
	for _, from := range []string{"idle", "ready", "running", "held", "paused", "paced", "gone"} {
		for _, on := range events {
			for _, p := range []bool{false, true} {
				to, ok := seqsched.Transition(from, on, p)
				w, has := want[key{from, on, p}]
				require.Equal(t, has, ok, "transition(%s, %s, paused %v) ok", from, on, p)
				require.Equal(t, w, to, "transition(%s, %s, paused %v)", from, on, p)
			}
		}
	}
}
