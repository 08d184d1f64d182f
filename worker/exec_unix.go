//go:build unix

package worker

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel starts cmd in a process group of its own and makes its
// cancel SIGKILL the whole group: what the job's shell started ends with it.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// progressPipe gives cmd its progress pipe, file descriptor 3.
func progressPipe(cmd *exec.Cmd) (*progressLines, error) { return newProgressLines(cmd) }
