package seqwatermill_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

// An operator lists the halted keys and each key's backlog, through the
// Subscriber or a Controller, and resumes them.
func TestHaltedKeysAndBacklogAreListed(t *testing.T) {
	r := newReleasing(4)
	for _, m := range []struct{ id, key string }{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}} {
		r.in <- msg(m.id, m.key)
	}
	var ctl seqwatermill.Controller
	log := newRecorder()
	s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(),
		seqwatermill.WithController(&ctl), seqwatermill.WithLogger(log))
	assert.Empty(t, ctl.Halted(), "halted keys before any")
	first, second := next(t, out), next(t, out) // a1 and b1, in either order
	if first.UUID == "b1" {
		first, second = second, first
	}
	first.Nack() // a halts
	require.Equal(t, "a", log.halted(t))
	assert.Equal(t, []string{"a"}, ctl.Halted(), "Controller.Halted")
	assert.Equal(t, []string{"a"}, s.Halted(), "Subscriber.Halted")
	assert.Equal(t, 3, ctl.Backlog("a"), "backlog of the halted key: its held message and the two behind it")
	assert.Equal(t, 1, ctl.Backlog("b"), "backlog of b: in the handler")
	assert.Equal(t, 0, ctl.Backlog("c"), "backlog of a key never seen")
	second.Ack()
	st := s.Stats()
	assert.Equal(t, 1, st.Halted, "Stats.Halted")
	assert.Equal(t, uint64(1), st.Halts, "Stats.Halts")

	require.NoError(t, ctl.Resume("a"))
	for _, want := range []string{"a1", "a2", "a3"} {
		m := next(t, out)
		require.Equal(t, want, m.UUID)
		m.Ack()
	}
	assert.Empty(t, ctl.Halted(), "halted keys after Resume")
	require.NoError(t, s.Close())
	assert.Equal(t, 0, ctl.Backlog("a"), "backlog after Close")
}
