//go:build !linux

package seqwatermill_test

// The fault test's member processes need Linux (a member dies with its
// test process); elsewhere there are none.

const memberEnv = "SEQWATERMILL_TEST_MEMBER"

func memberMain() int { return 2 }
