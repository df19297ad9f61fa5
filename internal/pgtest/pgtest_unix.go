//go:build unix

package pgtest

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

const quit = syscall.SIGQUIT

// runAs is the uid and gid the server runs as: the postgres user when this
// process is root (PostgreSQL refuses root), else nil.
func runAs() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil // initdb will say why it refuses
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func setCredential(cmd *exec.Cmd) {
	if c := runAs(); c != nil {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = c
	}
}

// own gives dir to the user the server runs as.
func own(dir string) error {
	if c := runAs(); c != nil {
		return os.Chown(dir, int(c.Uid), int(c.Gid))
	}
	return nil
}
