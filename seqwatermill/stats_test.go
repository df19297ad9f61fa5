package seqwatermill_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

func TestStatsCountWhatHappened(t *testing.T) {
	r := newReleasing(3)
	r.in <- msg("a1", "a")
	r.in <- msg("a2", "a")
	r.in <- msg("b1", "b")
	s, out := subscribe(t, r, seqwatermill.WithRetries(2, noBackoff))
	// a1: nacked, then acked; a2: nacked on both attempts; b1: acked.
	got := map[string]int{}
	for range 5 {
		m := next(t, out)
		got[m.UUID]++
		if m.UUID == "a2" || (m.UUID == "a1" && got["a1"] == 1) {
			m.Nack()
			continue
		}
		m.Ack()
	}
	require.NoError(t, s.Close())
	st := s.Stats()
	assert.Equal(t, uint64(3), st.Received, "Received")
	assert.Equal(t, uint64(2), st.Acked, "Acked")
	assert.Equal(t, uint64(1), st.Nacked, "Nacked")
	assert.Equal(t, uint64(2), st.Retries, "Retries: a1 once, a2 once")
	assert.Equal(t, 0, st.Buffered, "Buffered after Close")
	assert.Equal(t, uint64(5), st.HandlerTime.Count, "HandlerTime: one per attempt")
	assert.Equal(t, uint64(3), st.QueueTime.Count, "QueueTime: one per message")
}
