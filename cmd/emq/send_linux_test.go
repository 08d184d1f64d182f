package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"unsafe"

	bt "github.com/eventmq/emq/internal/brokertest"
)

// emq send --reply ends a REPLY without a newline with one on a terminal
// (into a pipe it stays byte for byte: TestSendAndWorkerExec).
func TestSendReplyOnTerminal(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fastBroker)
	startWorkerProcess(t, "--broker", b.Backend(), "--queues", "upper", "--exec", "tr a-z A-Z")
	master, tty := openPTY(t)
	cmd := exec.Command(os.Args[0], "send", "--broker", b.Frontend(), "--queue", "upper", "--reply", "hello")
	cmd.Env = bt.ChildEnv(mainEnv + "=1")
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = tty, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatal(err, errOut.String())
	}
	tty.Close()
	out, err := io.ReadAll(master) // what the terminal shows, then EIO: no writer left
	var errno syscall.Errno
	if err != nil && !(errors.As(err, &errno) && errno == syscall.EIO) {
		t.Fatal(err)
	}
	if string(out) != "HELLO\r\n" { // the terminal writes a newline as \r\n
		t.Fatalf("the terminal shows %q, want the REPLY and a newline", out)
	}
}

// openPTY opens a pseudo-terminal: its master, and the terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	var n uint32
	for _, op := range []struct {
		req uintptr
		arg unsafe.Pointer
	}{{syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)}, {syscall.TIOCGPTN, unsafe.Pointer(&n)}} {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), op.req, uintptr(op.arg)); e != 0 {
			t.Fatal(e)
		}
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}
