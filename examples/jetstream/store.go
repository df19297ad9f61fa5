package main

import (
	"sync"
)

// store is the state the handlers write, with an audit of every
// application. Its rule is the one a user can rely on because the
// consumer keeps per-key stream order across instances: a message whose
// stream sequence is at or below the last one applied for its key is a
// redelivery of something already applied, and is skipped. The audit
// checks that rule from the outside: a message applied while its key's
// previous message was not is an order violation, one applied twice a
// duplicate, and one never applied (skipped wrongly, or never delivered)
// is lost.
type store struct {
	mu       sync.Mutex
	prev     map[uint64]uint64 // sequence → the previous sequence of its key (0: first)
	last     map[string]uint64 // key → last sequence applied (the rule)
	applied  map[uint64]bool   // the audit
	skipped  int               // redeliveries recognised by the rule
	dups     int               // applications of a sequence already applied
	disorder int               // applications whose key's previous message was not applied yet
	dead     map[int]bool      // instances killed: a dead process applies nothing
}

func newStore(prev map[uint64]uint64) *store {
	return &store{prev: prev, last: make(map[string]uint64), applied: make(map[uint64]bool), dead: make(map[int]bool)}
}

// apply applies seq of key for instance inst, following the rule when
// useRule is set (the ordered consumer) and applying everything otherwise
// (the baselines, which have no order to rely on). It reports false for a
// dead instance.
func (s *store) apply(inst int, key string, seq uint64, useRule bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead[inst] {
		return false
	}
	if useRule {
		if seq <= s.last[key] {
			s.skipped++
			return true
		}
		s.last[key] = seq
	}
	if p := s.prev[seq]; p != 0 && !s.applied[p] {
		s.disorder++
	}
	if s.applied[seq] {
		s.dups++
	}
	s.applied[seq] = true
	return true
}

func (s *store) kill(inst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead[inst] = true
}

func (s *store) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applied)
}

type audit struct{ applied, skipped, dups, disorder int }

func (s *store) audit() audit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return audit{len(s.applied), s.skipped, s.dups, s.disorder}
}
