package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	t.Parallel()
	polls := 0
	Eventually(t, "the third poll", func() bool { polls++; return polls == 3 })
	if polls != 3 {
		t.Fatalf("polled %d times, want 3", polls)
	}
}

// fatalTB records the failure and ends its goroutine, as testing's own
// Fatalf does.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventuallyFailsNamingWhat(t *testing.T) {
	t.Parallel()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyWithin(f, 0, "the impossible", func() bool { return false })
		t.Error("EventuallyWithin returned on a false condition")
	}()
	<-done
	if !strings.HasPrefix(f.failed, "the impossible: not within") {
		t.Fatalf("failed with %q, want it to name what it waited for", f.failed)
	}
}

func TestRecvFailsNamingWhat(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if v := Recv(t, ch, "a value sent"); v != 7 {
		t.Fatalf("got %d, want 7", v)
	}
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		RecvWithin(f, 0, ch, "the value never sent")
		t.Error("RecvWithin returned with nothing sent")
	}()
	<-done
	if !strings.HasPrefix(f.failed, "the value never sent: nothing within") {
		t.Fatalf("failed with %q, want it to name what it waited for", f.failed)
	}
}
