package broker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/cutfs"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// mountCut mounts a power-cut layer over root, or skips (fails with
// EMQ_REQUIRE_FUSE set, as in CI).
func mountCut(t *testing.T, root string) *cutfs.FS {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "the power-cut tests need root to mount FUSE")
	}
	c, err := cutfs.Mount(root, filepath.Join(t.TempDir(), "mnt"))
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cannot mount FUSE (/dev/fuse, fuse3): %v", err)
	}
	return c
}

// storedJobs opens the journal in dir as the next broker would (a torn
// tail is cut) and counts each pending job's entries.
func storedJobs(t *testing.T, dir string) map[string]int { return storedJobsWith(t, dir, nil) }

// storedJobsWith is storedJobs of a journal encrypted with keys.
func storedJobsWith(t *testing.T, dir string, keys *store.Keyring) map[string]int {
	t.Helper()
	opts := boltstore.DefaultOptions()
	opts.Keys = keys
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), opts)
	if err != nil {
		t.Fatalf("the journal after the cut does not open: %v", err)
	}
	defer j.Close()
	n := map[string]int{}
	if err := j.Load(func(job *store.Job) error { n[job.MsgID]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// loadUntil sends jobs of size bytes (at least a few) to queue keep
// (nobody serves it) and queue work (a worker replies), keeping 64
// unACKed, until stop; it sends each ACKed msgid on acks.
func loadUntil(t *testing.T, c *child, stop <-chan struct{}, acks chan<- string, size int) {
	client := dialRaw(t, c.frontend, "cut-client")
	worker := dialRaw(t, c.backend, "cut-worker")
	worker.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "work"}}})
	for range 8 {
		worker.send(&emqp.Ready{MsgID: emqp.NewID()})
	}
	go func() {
		for m := range worker.in {
			if r, ok := m.(*emqp.Request); ok {
				worker.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
				worker.send(&emqp.Ready{MsgID: emqp.NewID()})
			}
		}
	}()
	window := make(chan struct{}, 64)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case window <- struct{}{}:
			}
			q := "keep"
			if i%3 == 0 {
				q = "work"
			}
			payload := fmt.Append(nil, "job ", i)
			payload = append(payload, make([]byte, max(0, size-len(payload)))...)
			if client.send(&emqp.Request{MsgID: q + "-" + emqp.NewID(), Queue: q, Payload: payload}) != nil {
				return
			}
		}
	}()
	for m := range client.in {
		if a, ok := m.(*emqp.Ack); ok {
			<-window
			acks <- a.AckedID
		}
	}
}

// A power cut, not only a kill: the journal's folder is a layer that
// loses every write not yet flushed (cutfs), and in half the rounds
// lets a random prefix of the last one through (a torn write); the
// broker child is SIGKILLed at the same moment. After each cut every
// ACKed job is stored, once. 10 cuts; 200 with EMQ_TORTURE.
func TestPowerCutLosesNoAckedJob(t *testing.T) {
	t.Parallel()
	powerCuts(t, "")
}

// The same with the journal encrypted at rest (--journal-keys): every
// ACKed job is stored once after each cut, and no file holds a payload's
// text.
func TestPowerCutEncryptedLosesNoAckedJob(t *testing.T) {
	t.Parallel()
	powerCuts(t, journalKeys(t))
}

// journalKeys writes a key file, and names it.
func journalKeys(t *testing.T) string {
	line, err := store.NewJournalKey("cut")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "journal.keys")
	if err := os.WriteFile(file, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// childKeys are the keys in keysFile ("": none, nil) and the broker
// child's environment that gives them to it.
func childKeys(t *testing.T, keysFile string) (*store.Keyring, []string) {
	env := []string{"EMQ_TEST_SEGMENT=1048576"}
	if keysFile == "" {
		return nil, env
	}
	keys, err := store.ReadKeyring(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	return keys, append(env, "EMQ_TEST_JOURNAL_KEYS="+keysFile)
}

// powerCuts runs the power-cut rounds, with the journal encrypted by
// the keys in keysFile ("": none).
func powerCuts(t *testing.T, keysFile string) {
	keys, env := childKeys(t, keysFile)
	rounds := 10
	if torture() {
		rounds = 200
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	root := t.TempDir()
	acked := map[string]bool{}
	for round := range rounds {
		fs := mountCut(t, root)
		frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
		c := startChild(t, fs.Dir(), frontend, backend, env...)
		stop := make(chan struct{})
		acks := make(chan string, 4096)
		var done sync.WaitGroup
		done.Go(func() { loadUntil(t, c, stop, acks, 0) })
		cutAt := 50 + rng.IntN(1500)
		for n := 0; n < cutAt; n++ {
			select {
			case id := <-acks:
				if id[:4] == "keep" {
					acked[id] = true
				}
			case <-time.After(bt.Wait):
				t.Fatalf("round %d: no ACK for %v", round, bt.Wait)
			}
		}
		// Half the cuts land at a moment of their own while writes go on
		// (not a synchronisation: a place in the load); half land right
		// after a write, before its flush, where a timer rarely finds.
		// Every other one tears the last write.
		tear := round%2 == 1
		var what string
		if round%4 < 2 {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			what = fs.Cut(tear, rng)
		} else {
			select {
			case what = <-fs.CutAfter(1+rng.IntN(20), tear, rng):
			case <-time.After(bt.Wait):
				t.Fatalf("round %d: no write to cut after for %v", round, bt.Wait)
			}
		}
		c.kill()
		close(stop)
		for len(acks) > 0 { // ACKs sent before the cut count: they were flushed
			if id := <-acks; id[:4] == "keep" {
				acked[id] = true
			}
		}
		if err := fs.Unmount(); err != nil {
			t.Fatal(err)
		}
		done.Wait()
		storedOnceWith(t, root, keys, acked, fmt.Sprintf("round %d (%s)", round, what))
		t.Logf("round %d: cut after %d ACKs: %s; %d ACKed jobs stored, each once", round, cutAt, what, len(acked))
	}
	if keys != nil {
		noPayloadText(t, root)
		return
	}
	suite.add("power cuts survived", rounds)
	suite.add("ACKed jobs across power cuts", len(acked))
}

// noPayloadText fails unless no file under root holds the text of
// loadUntil's payloads ("job N").
func noPayloadText(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "job 1") {
			t.Errorf("%s holds a payload's text", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A power cut right after a checkpoint deleted a segment of the log:
// the jobs that segment held are then in bbolt's file alone, and there
// only if the checkpoint's commit was flushed before the segment went.
// Segments of 1 MiB and jobs of 4 KiB: every round fills a segment, a
// checkpoint (each second) deletes it, and the cut lands right after
// that deletion (cutfs.CutAfterRemove); every other cut tears the last
// write. After each, every ACKed job is stored, once. 4 rounds; 40 with
// EMQ_TORTURE.
func TestPowerCutAfterACheckpointLosesNoAckedJob(t *testing.T) {
	t.Parallel()
	powerCutsAfterCheckpoints(t, "")
}

// The same with the journal encrypted at rest.
func TestPowerCutAfterACheckpointEncryptedLosesNoAckedJob(t *testing.T) {
	t.Parallel()
	powerCutsAfterCheckpoints(t, journalKeys(t))
}

func powerCutsAfterCheckpoints(t *testing.T, keysFile string) {
	keys, env := childKeys(t, keysFile)
	rounds := 4
	if torture() {
		rounds = 40
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	root := t.TempDir()
	acked := map[string]bool{}
	segment := func(name string) bool { return strings.HasSuffix(name, ".wal") }
	for round := range rounds {
		fs := mountCut(t, root)
		frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
		c := startChild(t, fs.Dir(), frontend, backend, env...)
		cut := fs.CutAfterRemove(segment, round%2 == 1, rng)
		stop := make(chan struct{})
		acks := make(chan string, 4096)
		var done sync.WaitGroup
		done.Go(func() { loadUntil(t, c, stop, acks, 4096) })
		kept := 0
		note := func(id string) {
			if id[:4] == "keep" {
				acked[id] = true
				kept++
			}
		}
		var what string
		deadline := time.After(time.Minute)
		for what == "" {
			select {
			case id := <-acks:
				note(id)
			case what = <-cut:
			case <-deadline:
				t.Fatalf("round %d: no segment deleted after %d jobs ACKed in a minute", round, kept)
			}
		}
		c.kill()
		close(stop)
		for len(acks) > 0 { // ACKs sent before the cut count: they were flushed
			note(<-acks)
		}
		if err := fs.Unmount(); err != nil {
			t.Fatal(err)
		}
		done.Wait()
		storedOnceWith(t, root, keys, acked, fmt.Sprintf("round %d (%s)", round, what))
		t.Logf("round %d: %s, %d keep jobs ACKed before it; %d ACKed jobs stored, each once", round, what, kept, len(acked))
	}
	if keys != nil {
		noPayloadText(t, root)
		return
	}
	suite.add("power cuts after a checkpoint survived", rounds)
}

// An fdatasync that fails (EIO) is not retried and believed: what it
// held is never ACKed, the broker takes no more writes (ERROR
// unavailable, naming the log), and after a restart every job ACKed
// before is there, and the broker serves again.
func TestFailedFlushStopsWrites(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fs := mountCut(t, root)
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	c := startChild(t, fs.Dir(), frontend, backend, "EMQ_TEST_SEGMENT=1048576")
	client := bt.Dial(t, frontend, "c")
	var acked []string
	for range 20 {
		acked = append(acked, client.Request("keep", "", []byte("before")))
	}
	fs.FailSyncs(1 << 20) // every flush from now on
	id := emqp.NewID()
	client.Send(&emqp.Request{MsgID: id, Queue: "keep", Payload: []byte("during")})
	e, ok := client.Recv().(*emqp.Error)
	if !ok || e.Code != emqp.CodeUnavailable || e.RefMsgID != id {
		t.Fatalf("a REQUEST whose flush failed: %+v, want ERROR unavailable", e)
	}
	t.Logf("refused: %s", e.Text)
	fs.FailSyncs(0) // the disk works again: the broker still takes nothing
	id2 := emqp.NewID()
	client.Send(&emqp.Request{MsgID: id2, Queue: "keep", Payload: []byte("after")})
	if e, ok := client.Recv().(*emqp.Error); !ok || e.Code != emqp.CodeUnavailable {
		t.Fatalf("a REQUEST after a failed flush: %+v, want ERROR unavailable (what the disk holds is unknown)", e)
	}
	c.kill()
	fs.Unmount()
	stored := storedJobs(t, root)
	for _, a := range acked {
		if stored[a] != 1 {
			t.Fatalf("ACKed job %s stored %d times after the failed flush", a, stored[a])
		}
	}
	fs = mountCut(t, root)
	defer fs.Unmount()
	c = startChild(t, fs.Dir(), frontend, backend, "EMQ_TEST_SEGMENT=1048576")
	bt.Dial(t, frontend, "c2").Request("keep", "", []byte("again"))
	c.kill()
}

// storedOnce fails unless the journal under root holds every job of
// acked once.
func storedOnce(t *testing.T, root string, acked map[string]bool, what string) {
	t.Helper()
	storedOnceWith(t, root, nil, acked, what)
}

// storedOnceWith is storedOnce of a journal encrypted with keys.
func storedOnceWith(t *testing.T, root string, keys *store.Keyring, acked map[string]bool, what string) {
	t.Helper()
	stored := storedJobsWith(t, root, keys)
	for id := range acked {
		switch stored[id] {
		case 1:
		case 0:
			t.Fatalf("%s: ACKed job %s lost", what, id)
		default:
			t.Fatalf("%s: ACKed job %s stored %d times", what, id, stored[id])
		}
	}
}
