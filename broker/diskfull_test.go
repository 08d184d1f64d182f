package broker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// mountTmpfs mounts a small tmpfs for the journal; when that is not
// possible (not root, no mount) it skips, or fails with EMQ_REQUIRE_MOUNT
// set (CI).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "EMQ_REQUIRE_MOUNT", "needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_MOUNT", "cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// A full disk refuses REQUESTs with ERROR unavailable and ACKs none of
// them; the broker keeps serving and takes jobs again when space returns.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, "8m")
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	small := func(o *broker.Options) { fast(o); o.JournalSegmentSize, o.JournalMaxLog = 1<<20, 1<<20 }
	b := bt.Start(t, dir, small)
	client := bt.Dial(t, b.Frontend(), "c")
	payload := make([]byte, 32<<10)
	var acked []string
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		id := emqp.NewID()
		client.Send(&emqp.Request{MsgID: id, Queue: "q", Payload: payload})
		switch m := client.Recv().(type) {
		case *emqp.Ack:
			acked = append(acked, m.AckedID)
		case *emqp.Error:
			if m.Code != emqp.CodeUnavailable || m.RefMsgID != id {
				t.Fatalf("ERROR %+v, want unavailable for %s", m, id)
			}
			t.Logf("refused after %d jobs: %s", len(acked), m.Text)
			refused = true
		}
	}
	if !refused {
		t.Fatal("the journal never filled the disk")
	}
	// What was ACKed is still served.
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != acked[0] {
		t.Fatalf("worker got %s, want %s", got.MsgID, acked[0])
	}
	// Space returns: new jobs are taken again (once the log has room, or
	// the checkpoint that it waits for has caught up).
	os.Remove(filler)
	var again string
	bt.Eventually(t, "a job taken again", func() bool {
		id := emqp.NewID()
		client.Send(&emqp.Request{MsgID: id, Queue: "q", Payload: payload})
		if _, ok := client.Recv().(*emqp.Ack); ok {
			again = id
			return true
		}
		return false
	})
	acked = append(acked, again)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	// The file opens cleanly and holds every ACKed job.
	b2 := bt.Start(t, dir, func(o *broker.Options) { small(o); o.MaxPending = 0 })
	w2 := bt.Worker(t, b2.Backend(), "w2", "q")
	w2.Ready(len(acked))
	seen := map[string]bool{}
	for range len(acked) {
		seen[bt.Expect[*emqp.Request](w2).MsgID] = true
	}
	for _, id := range acked {
		if !seen[id] {
			t.Fatalf("ACKed job %s lost after the disk was full", id)
		}
	}
}
