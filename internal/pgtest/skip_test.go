package pgtest_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const childEnv = "PGTEST_CHILD"

// Without a server, outside CI, the examples named *_live are added to
// -test.skip; a -skip the user gave keeps its meaning, down to a subtest.
func TestAGivenSkipOfASubtestHoldsBesideTheLiveExamples(t *testing.T) {
	const name = "TestAGivenSkipOfASubtestHoldsBesideTheLiveExamples"
	if os.Getenv(childEnv) == "no-server" {
		for _, sub := range []string{"kept", "given"} {
			t.Run(sub, func(t *testing.T) {})
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.v",
		"-test.run", "^"+name+"$|^Example_live$",
		"-test.skip", name+"/given")
	cmd.Env = append(os.Environ(), childEnv+"=no-server", "CI=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child run: %v\n%s", err, out)
	}
	for _, want := range []string{"--- PASS: " + name + "/kept", "the live examples are skipped too"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child run's output has no %q:\n%s", want, out)
		}
	}
	for _, not := range []string{name + "/given", "Example_live"} {
		if strings.Contains(string(out), not) {
			t.Errorf("child run ran %s, which -test.skip names:\n%s", not, out)
		}
	}
}

// Example_live stands for an example that needs the server: the child run
// above must skip it.
func Example_live() {
	fmt.Println("ran")
	// Output: ran
}
