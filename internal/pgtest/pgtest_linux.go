package pgtest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel send the server SIGQUIT (immediate
// shutdown) when the test process dies, even by SIGKILL, so that no
// server outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
}
