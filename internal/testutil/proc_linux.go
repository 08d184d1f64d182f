package testutil

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd's process get SIGKILL when the test binary
// that started it dies (killed, timed out, panicked before its
// cleanups), so that no child outlives the test.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
