package seqpg_test

// workerEnv, when set, makes the test binary run as a worker process
// (workerMain) for the property test.
const workerEnv = "SEQPG_TEST_WORKER"

func workerMain() int { return 0 }
