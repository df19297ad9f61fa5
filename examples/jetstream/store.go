package main

import (
	"errors"
	"sync"
)

// store is the state the handlers write, with an audit of every
// application. Its rules are the ones a user can rely on because the
// consumer keeps per-key stream order across instances (applyOwned): a
// message whose stream sequence is at or below the last one applied for
// its key is a redelivery of something already applied, and is skipped;
// a write under an ownership epoch below the highest one its partition
// was written under comes from an owner that lost the partition and did
// not know it yet (it stalled), and is refused. The audit checks the
// result from the outside: a message applied while its key's previous
// message was not is an order violation, one applied twice a duplicate,
// and one never applied (skipped wrongly, or never delivered) is lost.
type store struct {
	mu       sync.Mutex
	prev     map[uint64]uint64 // sequence → the previous sequence of its key (0: first)
	last     map[string]uint64 // key → last sequence applied (the sequence rule)
	epochs   map[string]uint64 // partition → highest epoch written under (the fence)
	applied  map[uint64]bool   // the audit
	skipped  int               // redeliveries recognised by the sequence rule
	fenced   int               // writes refused by the fence
	dups     int               // applications of a sequence already applied
	disorder int               // applications whose key's previous message was not applied yet
	dead     map[int]bool      // instances killed: a dead process applies nothing
}

var (
	errDead   = errors.New("instance killed")
	errFenced = errors.New("stale owner: a later owner wrote this partition")
)

func newStore(prev map[uint64]uint64) *store {
	return &store{prev: prev, last: make(map[string]uint64), epochs: make(map[string]uint64),
		applied: make(map[uint64]bool), dead: make(map[int]bool)}
}

// applyOwned applies seq of key, in partition part, for instance inst,
// whose ownership epoch of the partition is epoch, following both rules.
// It returns errDead for a dead instance and errFenced for a stale owner:
// the handler fails, and nothing is acknowledged for the message, which
// runs on the partition's new owner.
func (s *store) applyOwned(inst int, part, key string, seq, epoch uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead[inst] {
		return errDead
	}
	if epoch < s.epochs[part] {
		s.fenced++
		return errFenced
	}
	s.epochs[part] = epoch
	if seq <= s.last[key] {
		s.skipped++
		return nil
	}
	s.last[key] = seq
	s.record(seq)
	return nil
}

// apply applies seq of key for a baseline, which has no order to rely
// on: everything is applied.
func (s *store) apply(key string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(seq)
}

// record audits the application of seq. Called with mu held.
func (s *store) record(seq uint64) {
	if p := s.prev[seq]; p != 0 && !s.applied[p] {
		s.disorder++
	}
	if s.applied[seq] {
		s.dups++
	}
	s.applied[seq] = true
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

type audit struct{ applied, skipped, fenced, dups, disorder int }

func (s *store) audit() audit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return audit{len(s.applied), s.skipped, s.fenced, s.dups, s.disorder}
}
