//go:build unix

package agent

import (
	"os/exec"
	"syscall"
)

// killGroup runs cmd in a process group of its own and makes its cancel
// kill the group: the shell's children (a sleep, a python) too.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
