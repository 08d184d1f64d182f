package boltstore_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// The child side of TestCrashAppend: append jobs from 16 goroutines and
// print each msgid once its append returned (is durable).
func TestCrashChild(t *testing.T) {
	path := os.Getenv("EMQ_CRASH_CHILD")
	if path == "" {
		t.Skip("run by TestCrashAppend")
	}
	j, err := boltstore.Open(path, boltstore.DefaultOptions())
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				id := emqp.NewID()
				_, err := store.Wait(func(done func(bool, error)) {
					j.Append(&store.Job{MsgID: id, Queue: "q", Payload: []byte(id)}, done)
				})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintln(out, id)
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestCrashAppend SIGKILLs a process that appends, at a random moment,
// and checks that every msgid it reported durable is in the file, which
// opens cleanly. EMQ_TORTURE=1 runs it 200 times instead of 20.
func TestCrashAppend(t *testing.T) {
	t.Parallel()
	if os.Getenv("EMQ_CRASH_CHILD") != "" {
		t.Skip("child")
	}
	rounds := 20
	if os.Getenv("EMQ_TORTURE") != "" {
		rounds = 200
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	total := 0
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EMQ_CRASH_CHILD="+path)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := rand.IntN(3000) + 1
		var acked []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if len(line) != 36 {
				t.Fatalf("round %d: child said %q", round, line)
			}
			acked = append(acked, line)
			if len(acked) == killAfter {
				_ = cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child ended without being killed: %v", round, err)
		}

		j, err := boltstore.Open(path, boltstore.DefaultOptions())
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		stored := map[string]bool{}
		if err := j.Load(func(jb *store.Job) error { stored[jb.MsgID] = true; return nil }); err != nil {
			t.Fatalf("round %d: load: %v", round, err)
		}
		if err := j.Payloads(acked, func(i int, p []byte, err error) {
			if err == nil && string(p) != acked[i] {
				t.Errorf("round %d: job %s has payload %q", round, acked[i], p)
			}
		}); err != nil {
			t.Fatalf("round %d: payloads: %v", round, err)
		}
		j.Close()
		for _, id := range acked {
			if !stored[id] {
				t.Fatalf("round %d: msgid %s was reported durable but is missing after SIGKILL", round, id)
			}
		}
		total += len(acked)
	}
	t.Logf("%d rounds, %d acknowledged appends, none lost", rounds, total)
}
