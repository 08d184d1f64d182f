//go:build !linux

package testutil

import "os/exec"

// DieWithParent does nothing here: only Linux has a parent-death signal.
func DieWithParent(*exec.Cmd) {}
