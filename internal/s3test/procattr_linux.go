package s3test

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the server when the test binary dies,
// so that a crashed or killed test run leaves no server behind.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) != syscall.ESRCH
}
