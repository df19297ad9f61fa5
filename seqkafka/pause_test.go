package seqkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

// Pause lets the running handler finish, starts nothing more (not even
// records already fetched), fetches nothing, and keeps the membership;
// Resume takes up where it stopped.
func TestPauseHoldsRecordsAndKeepsTheMembership(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "running"), rec(0, "b", "fetched")})
	st := newStore()
	g := newGate()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			if err := g.wait(ctx, 0); err != nil {
				return err
			}
		}
		st.apply(r)
		return nil
	}, seqkafka.WithMaxConcurrency(1)) // b waits for a's slot
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered
	_, gen := cons.Client().GroupMetadata()

	cons.Pause()
	cons.Pause() // idempotent
	s := cons.Stats()
	require.True(t, s.Paused)
	require.Len(t, s.Partitions, 1)
	require.True(t, s.Partitions[0].Paused)
	close(g.open) // the running handler finishes
	<-st.at(1)
	produce(t, c, []*kgo.Record{rec(0, "c", "after pause")})
	// Nothing happens while paused: give a fetch (50ms max wait) and the
	// fetched record b every chance to go, then look.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 1, st.count(), "a record started while paused")
	s = cons.Stats()
	require.Equal(t, 1, s.Buffered, "b is fetched and held")
	require.Zero(t, s.InFlight)
	_, gen2 := cons.Client().GroupMetadata()
	require.Equal(t, gen, gen2, "the pause cost the membership")

	cons.Resume()
	cons.Resume() // idempotent
	<-st.at(3)
	require.False(t, cons.Stats().Paused)
	require.NoError(t, m.close(t, 10*time.Second))
	st.checkOrder(t)
}

// A record held by Pause is given back, not done, when the consumer
// closes: Close does not wait for a Resume that will not come.
func TestCloseWhilePausedGivesHeldRecordsBack(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", ""), rec(0, "b", "")})
	w := watchCommits(c)
	st := newStore()
	g := newGate()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			if err := g.wait(ctx, 0); err != nil {
				return err
			}
		}
		st.apply(r)
		return nil
	}, seqkafka.WithMaxConcurrency(1), seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered
	cons.Pause()
	close(g.open)
	<-st.at(1)
	start := time.Now()
	require.NoError(t, m.close(t, 10*time.Second))
	require.Less(t, time.Since(start), 5*time.Second, "Close waited for the held record")
	require.False(t, st.isApplied(0, 1))
	seen := w.all()
	require.NotEmpty(t, seen)
	require.Equal(t, int64(1), seen[len(seen)-1].offset, "the held record is not committed past")
}
