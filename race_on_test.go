//go:build race

package seqsched_test

// raceEnabled reports a -race build: the race detector allows at most 8128
// live goroutines, so tests that could start one per session stay below it.
const raceEnabled = true
