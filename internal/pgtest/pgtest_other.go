//go:build !linux

package pgtest

import "os/exec"

// dieWithParent does nothing outside Linux: a test process killed there
// may leave its server running.
func dieWithParent(cmd *exec.Cmd) {}
