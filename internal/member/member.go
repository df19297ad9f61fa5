//go:build linux

// Package member runs a test binary again as a member process of a fault
// test, so that the test can kill it (SIGKILL), freeze it (SIGSTOP) and
// thaw it as the real environment does. The test binary's TestMain
// recognises a member by an environment variable the test sets and runs
// the member's main instead of the tests.
package member

import (
	"bytes"
	"os"
	"os/exec"
	"syscall"
)

// Process is one member process. Its methods are for the one goroutine
// that runs the faults; they are not safe for concurrent use.
type Process struct {
	cmd    *exec.Cmd
	out    bytes.Buffer // stdout and stderr; read only after Wait
	frozen bool
	done   chan struct{} // closed when Wait returned
}

// Start runs the test binary again, running no test, with env
// ("NAME=value") added to the test's environment. The kernel kills the
// member if the test process dies, even by SIGKILL, so that none
// outlives its test.
func Start(env ...string) (*Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		_ = p.cmd.Wait() // how it ended is in its output
	}()
	return p, nil
}

// Pid is the member's process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Freeze stops the member (SIGSTOP): its timers, connections and
// goroutines stand still until Thaw, as in a long GC pause or a VM
// migration, while the rest of the world goes on.
func (p *Process) Freeze() {
	if !p.frozen {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		p.frozen = true
	}
}

// Thaw resumes a frozen member (SIGCONT).
func (p *Process) Thaw() {
	if p.frozen {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.frozen = false
	}
}

// Kill ends the member at once (SIGKILL), frozen or not, and returns its
// output.
func (p *Process) Kill() string {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return p.out.String()
}
