package seqwatermill_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) != "" {
		os.Exit(memberMain()) // a member process of the fault test (faults_test.go)
	}
	goleak.VerifyTestMain(m)
}
