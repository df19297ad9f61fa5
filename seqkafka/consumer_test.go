package seqkafka_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

// store records what handlers applied, for the tests' checks.
type store struct {
	mu      sync.Mutex
	applied map[int32]map[int64]int // partition -> offset -> times applied
	order   map[string][]int64      // "partition/key" -> offsets in first-application order
	total   int
	vals    []string              // values of the records applied, in first-application order
	reached map[int]chan struct{} // closed once total distinct applications reach the key
}

func newStore() *store {
	return &store{applied: map[int32]map[int64]int{}, order: map[string][]int64{}, reached: map[int]chan struct{}{}}
}

func (s *store) apply(r *kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied[r.Partition] == nil {
		s.applied[r.Partition] = map[int64]int{}
	}
	s.applied[r.Partition][r.Offset]++
	if s.applied[r.Partition][r.Offset] > 1 {
		return
	}
	k := fmt.Sprintf("%d/%s", r.Partition, r.Key)
	s.order[k] = append(s.order[k], r.Offset)
	s.vals = append(s.vals, string(r.Value))
	s.total++
	for n, ch := range s.reached {
		if s.total >= n {
			close(ch)
			delete(s.reached, n)
		}
	}
}

// at returns a channel closed once n distinct records were applied.
func (s *store) at(n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.total >= n {
		close(ch)
		return ch
	}
	s.reached[n] = ch
	return ch
}

func (s *store) isApplied(part int32, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[part][off] > 0
}

// checkOrder fails the test when some key's first applications are not
// in offset order.
func (s *store) checkOrder(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, offs := range s.order {
		for i := 1; i < len(offs); i++ {
			if offs[i] < offs[i-1] {
				t.Fatalf("key %s: first applications in order %v; want increasing offsets", k, offs)
			}
		}
	}
}

func TestRecordsOfOneKeyRunInOffsetOrder(t *testing.T) {
	c := cluster(t, 2)
	const n = 400
	produce(t, c, keyed(n, 2, 7))
	st := newStore()
	var mu sync.Mutex
	running := map[string]bool{}
	overlap := false
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		k := strconv.Itoa(int(r.Partition)) + string(r.Key)
		mu.Lock()
		if running[k] {
			overlap = true
		}
		running[k] = true
		mu.Unlock()
		st.apply(r)
		mu.Lock()
		running[k] = false
		mu.Unlock()
		return nil
	}, seqkafka.WithMaxConcurrency(8))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(n)
	require.NoError(t, m.close(t, 10*time.Second))
	st.checkOrder(t)
	require.False(t, overlap, "two records of one key ran at once")
	s := cons.Stats()
	require.Equal(t, uint64(n), s.Processed)
}

func (s *store) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}
