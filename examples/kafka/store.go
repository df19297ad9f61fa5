package main

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// store is the example's idempotent sink: a record is applied once per
// (partition, offset), whatever how often it is handled. It also checks
// order: each key's Normal records must be applied in offset order (High
// records overtake their key's queue by design, so they are not checked).
type store struct {
	mu         sync.Mutex
	applied    map[int32]map[int64]bool
	lastNormal map[string]int64 // "partition/key" -> last Normal offset applied
	violations map[string]int   // "partition/key" -> order violations
	count      int
	redeliver  int // handled again after being applied: ignored
	dead       int // distinct records dead-lettered
	target     int
	done       chan struct{} // closed when count reaches target
	half       chan struct{} // closed when count reaches target/2
}

func newStore(target int) *store {
	return &store{
		applied:    map[int32]map[int64]bool{},
		lastNormal: map[string]int64{},
		violations: map[string]int{},
		target:     target,
		done:       make(chan struct{}),
		half:       make(chan struct{}),
	}
}

// apply records r; deadLettered marks a record given up on.
func (s *store) apply(r *kgo.Record, high, deadLettered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied[r.Partition] == nil {
		s.applied[r.Partition] = map[int64]bool{}
	}
	if s.applied[r.Partition][r.Offset] {
		s.redeliver++
		return
	}
	s.applied[r.Partition][r.Offset] = true
	if deadLettered {
		s.dead++
	}
	if !high {
		k := string(rune(r.Partition)) + "/" + string(r.Key)
		if last, ok := s.lastNormal[k]; ok && r.Offset < last {
			s.violations[k]++
		}
		s.lastNormal[k] = max(s.lastNormal[k], r.Offset)
	}
	s.count++
	if s.count == s.target/2 {
		close(s.half)
	}
	if s.count == s.target {
		close(s.done)
	}
}

func (s *store) snapshot() (count, redeliver, dead, maxViolations int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		maxViolations = max(maxViolations, v)
	}
	return s.count, s.redeliver, s.dead, maxViolations
}
