//go:build !linux

package seqpg_test

const workerEnv = "SEQPG_TEST_WORKER"

// workerMain is linux-only: the property test uses Pdeathsig.
func workerMain() int { return 1 }
