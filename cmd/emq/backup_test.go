package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/worker"
)

// openStored opens a stopped broker's journal in dir.
func openStored(t *testing.T, dir string) store.Journal {
	t.Helper()
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), boltstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// A backup taken while 16 senders send and a worker completes jobs,
// restored into another directory, holds every job ACKed before it began
// (but those completed meanwhile), and none whose completion the journal
// had before it began; the restored journal is a broker's.
func TestBackupUnderLoad(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { o.HeartbeatInterval, o.HeartbeatTimeout = 100*time.Millisecond, time.Second }, nil)
	var mu sync.Mutex
	acked := map[string]bool{}
	replied := map[string]bool{}
	startWorker := func() {
		// A worker slower than the senders: a backlog grows while jobs
		// complete.
		w, err := worker.New(worker.Options{Broker: b.Backend(), Concurrency: 4, Logger: bt.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("q", func(_ context.Context, j *worker.Job) ([]byte, error) {
			time.Sleep(2 * time.Millisecond) // the job's work
			mu.Lock()
			replied[j.MsgID] = true
			mu.Unlock()
			return nil, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	startWorker()
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for range 16 {
		c, err := client.New(client.Options{Broker: b.Frontend(), Logger: bt.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		senders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, err := c.Send(context.Background(), "q", []byte("load"))
				if err == nil {
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				}
			}
		})
	}
	// A minute: under the race detector on a loaded machine a thousand
	// round trips can take more than bt.Wait.
	testutil.EventuallyWithin(t, time.Minute, "some load", func() bool { mu.Lock(); defer mu.Unlock(); return len(replied) > 1000 })

	// Before: what was ACKed, and what the journal had completed.
	mu.Lock()
	ackedBefore := make([]string, 0, len(acked))
	for id := range acked {
		ackedBefore = append(ackedBefore, id)
	}
	var repliedBefore []string
	for id := range replied {
		repliedBefore = append(repliedBefore, id)
	}
	mu.Unlock()
	var completedBefore []string
	for _, id := range repliedBefore {
		if _, _, err := b.Job(context.Background(), id); errors.Is(err, store.ErrNotFound) {
			completedBefore = append(completedBefore, id)
		}
	}
	file := filepath.Join(t.TempDir(), "load.emqbackup")
	out, stderr, err := emq(t, "", "backup", "--admin", b.AdminAddr(), "--to", file)
	close(stop)
	senders.Wait()
	if err != nil {
		t.Fatalf("emq backup: %v\n%s", err, stderr)
	}
	t.Logf("%s(%d ACKed, %d of them completed, before it)", out, len(ackedBefore), len(completedBefore))

	dir := t.TempDir()
	if out, stderr, err := emq(t, "", "restore", "--from", file, "--data-dir", dir); err != nil || !strings.Contains(out, "restored") {
		t.Fatalf("emq restore: %v\n%s%s", err, out, stderr)
	}
	j := openStored(t, dir)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ackedBefore {
		if _, err := j.Get(id); err != nil && !replied[id] {
			t.Fatalf("job %s, ACKed before the backup and never completed, is not in it: %v", id, err)
		}
	}
	for _, id := range completedBefore {
		if _, err := j.Get(id); err == nil {
			t.Fatalf("job %s, completed before the backup, is in it", id)
		}
	}
}

// A damaged or cut backup is refused naming the damage, and nothing is
// written; a journal that holds jobs is refused without --force; one a
// running broker holds is refused; the read-only token may not back up;
// a restored journal keeps dead letters, schedules and queue controls,
// and a broker started on it runs its pending jobs.
func TestBackupRefusalsAndRestore(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fastBroker, func(o *admin.Options) { o.Token, o.ReadToken = "full", "read" })
	c := bt.Dial(t, b.Frontend(), "c")
	pending := c.Request("q", "priority:3", []byte("keep me"))
	dead := c.Request("d", "retry-count:0", []byte("doomed"))
	w := bt.Worker(t, b.Backend(), "w", "d")
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	w.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: dead, Reason: "no"})
	bt.Eventually(t, "the dead letter", func() bool { return b.Stats().DeadLettered == 1 })
	if _, _, err := emq(t, "", "queues", "pause", "q", "--admin", b.AdminAddr(), "--admin-token", "full"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := emq(t, "", "schedules", "add", "--queue", "q", "--every", "1h", "--nohaste", "--admin", b.AdminAddr(), "--admin-token", "full", "tick"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "b.emqbackup")
	if _, stderr, err := emq(t, "", "backup", "--admin", b.AdminAddr(), "--admin-token", "read", "--to", file); err == nil || !strings.Contains(stderr, "full admin token") {
		t.Fatalf("backup with the read-only token: %v %s", err, stderr)
	}
	if _, stderr, err := emq(t, "", "backup", "--admin", b.AdminAddr(), "--admin-token", "full", "--to", file); err != nil {
		t.Fatalf("backup: %v %s", err, stderr)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.emqbackup")
	for name, data := range map[string][]byte{
		"checksum": append(append([]byte{}, raw[:len(raw)-40]...), append([]byte{raw[len(raw)-40] ^ 1}, raw[len(raw)-39:]...)...),
		"cut":      raw[:len(raw)/2],
	} {
		os.WriteFile(bad, data, 0o600)
		dir := t.TempDir()
		_, stderr, err := emq(t, "", "restore", "--from", bad, "--data-dir", dir)
		if err == nil || !strings.Contains(stderr, "not a whole EMQ backup") {
			t.Errorf("restore of a %s-damaged backup: %v %s", name, err, stderr)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("restore of a %s-damaged backup wrote %d files", name, len(entries))
		}
	}
	if _, stderr, err := emq(t, "", "restore", "--from", file, "--data-dir", b.Dir); err == nil || !strings.Contains(stderr, "running broker") {
		t.Errorf("restore into a running broker's journal: %v %s", err, stderr)
	}

	dir := t.TempDir()
	restore := func(args ...string) (string, error) {
		_, stderr, err := emq(t, "", append([]string{"restore", "--from", file, "--data-dir", dir}, args...)...)
		return stderr, err
	}
	if stderr, err := restore(); err != nil {
		t.Fatalf("restore: %v %s", err, stderr)
	}
	if stderr, err := restore(); err == nil || !strings.Contains(stderr, "--force") {
		t.Fatalf("restore into a journal with jobs: %v %s", err, stderr)
	}
	if stderr, err := restore("--force"); err != nil {
		t.Fatalf("restore --force: %v %s", err, stderr)
	}
	rb := bt.StartAdmin(t, dir, fastBroker, nil)
	if j, _, err := rb.Job(context.Background(), dead); err != nil || j.State != store.Dead {
		t.Fatalf("the dead letter restored: %+v, %v", j, err)
	}
	qi := bt.QueueInfo(t, rb, "q")
	if !qi.Paused || qi.Pending != 1 {
		t.Fatalf("the queue restored: %+v; want it paused with its job", qi)
	}
	if ss, _, err := rb.Schedules("", 0); err != nil || len(ss) != 1 {
		t.Fatalf("the schedule restored: %v, %v", ss, err)
	}
	if _, err := rb.ChangeQueue(context.Background(), "q", broker.QueueChange{Paused: new(bool)}); err != nil {
		t.Fatal(err)
	}
	w2 := bt.Worker(t, rb.Backend(), "w2", "q")
	w2.Ready(1)
	if req := bt.Expect[*emqp.Request](w2); req.MsgID != pending || string(req.Payload) != "keep me" {
		t.Fatalf("the restored broker gave %s %q", req.MsgID, req.Payload)
	}
}

// A backup moves a journal from one broker to a group's etcd and back:
// restored into an empty prefix, exported from it while nothing leads,
// restored into a data directory, it holds the same jobs.
func TestBackupThroughEtcd(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	b := bt.StartAdmin(t, "", fastBroker, nil)
	c := bt.Dial(t, b.Frontend(), "c")
	var ids []string
	for range 20 {
		ids = append(ids, c.Request("q", "", []byte("move me")))
	}
	first := filepath.Join(t.TempDir(), "first.emqbackup")
	if _, stderr, err := emq(t, "", "backup", "--admin", b.AdminAddr(), "--to", first); err != nil {
		t.Fatalf("backup: %v %s", err, stderr)
	}
	ep := strings.Join(etcd.Endpoints(), ",")
	if _, stderr, err := emq(t, "", "restore", "--from", first, "--etcd-endpoints", ep, "--etcd-prefix", "/moved/"); err != nil {
		t.Fatalf("restore into etcd: %v %s", err, stderr)
	}
	second := filepath.Join(t.TempDir(), "second.emqbackup")
	if _, stderr, err := emq(t, "", "backup", "--etcd-endpoints", ep, "--etcd-prefix", "/moved/", "--to", second); err != nil {
		t.Fatalf("backup from etcd: %v %s", err, stderr)
	}
	dir := t.TempDir()
	if _, stderr, err := emq(t, "", "restore", "--from", second, "--data-dir", dir); err != nil {
		t.Fatalf("restore from etcd's backup: %v %s", err, stderr)
	}
	j := openStored(t, dir)
	var loaded []string
	if err := j.Load(func(sj *store.Job) error { loaded = append(loaded, sj.MsgID); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(loaded, ",") != strings.Join(ids, ",") {
		t.Fatalf("after bbolt → etcd → bbolt: %d jobs %v\nwant %v", len(loaded), loaded, ids)
	}
}
