//go:build !unix

package worker

import "os/exec"

// killGroupOnCancel makes cmd's cancel kill the shell. There are no
// process groups here to end what the shell started; cmd.WaitDelay keeps
// those from holding the job once the shell is gone.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.Cancel = func() error { return cmd.Process.Kill() }
}

// progressPipe gives cmd no progress pipe: exec.Cmd.ExtraFiles, which
// would carry it, does not work on Windows.
func progressPipe(*exec.Cmd) (*progressLines, error) { return nil, nil }
