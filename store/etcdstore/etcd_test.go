package etcdstore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
	"github.com/eventmq/emq/store/storetest"
)

// TestEtcdConformance runs the journal's conformance suite on a real
// 3-member etcd cluster, each check under its own prefix.
func TestEtcdConformance(t *testing.T) { etcdConformance(t, nil) }

// TestEtcdConformanceEncrypted runs the suite again with the journal
// encrypted at rest.
func TestEtcdConformanceEncrypted(t *testing.T) { etcdConformance(t, storetest.Keys(t, "k1")) }

func etcdConformance(t *testing.T, keys *store.Keyring) {
	cli := etcdClient(t, etcdtest.Start(t, 3))
	var n atomic.Int64
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T, o storetest.Options) func() (store.Journal, error) {
			opts := etcdstore.DefaultOptions()
			opts.Prefix = fmt.Sprintf("/conformance/%d/", n.Add(1))
			opts.MaxJobSize = cmp.Or(o.MaxJobSize, opts.MaxJobSize)
			opts.Keys = keys
			// Every check at once on one cluster, under -race beside the
			// other packages' tests: a write may take more than the
			// default 5 s, and a timeout fences. The checks are about
			// outcomes, not time.
			opts.Timeout = 30 * time.Second
			// Batches commit overlapped here (the default is one at a
			// time, which the group's tests run): every check holds with
			// a batch reading the changes of batches still committing.
			opts.Pipeline = 4
			// Each journal after the first opens from a standby's copy
			// (Warm) that followed the one before through its watch.
			opts.OnWarmMissed = func(err error) { t.Errorf("the journal was read, not taken from the standby's copy: %v", err) }
			var last *etcdstore.Journal
			var warm *etcdstore.Warm
			t.Cleanup(func() { // after the check has closed its journals
				if warm != nil {
					warm.Stop()
				}
				if last != nil && !t.Failed() {
					sameShadow(t, cli, opts, last)
				}
			})
			return func() (store.Journal, error) {
				o := opts
				o.Warm = warm
				j, err := etcdstore.Open(cli, o)
				if err == nil {
					last = j
				}
				warm = etcdstore.StartWarm(cli, opts)
				return j, err
			}
		},
	})
}

// sameShadow fails t unless what j's shadow came to, through its own
// commits, is what a journal opened now derives from etcd: the indexes
// kept in memory alone are the records' own.
func sameShadow(t *testing.T, cli *clientv3.Client, opts etcdstore.Options, j *etcdstore.Journal) {
	t.Helper()
	opts.ReadOnly, opts.Warm = true, nil
	fresh, err := etcdstore.Open(cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	got, want := j.Shadow(), fresh.Shadow()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("shadow %s: %s after the commits, %s loaded", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("shadow %s: %s after the commits, not loaded", k, v)
		}
	}
}

func etcdClient(t testing.TB, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// openEtcd opens the journal, closed at cleanup.
func openEtcd(t *testing.T, cli *clientv3.Client, opts etcdstore.Options) *etcdstore.Journal {
	t.Helper()
	j, err := etcdstore.Open(cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// TestEtcdSplitsLargeBatches: a thousand appends at once are more than one
// etcd transaction takes; every one is stored, in order.
func TestEtcdSplitsLargeBatches(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	j := openEtcd(t, cli, opts)
	const n = 1000
	errs := make(chan error, n)
	for i := range n {
		j.Append(&store.Job{MsgID: fmt.Sprintf("m%04d", i), Queue: "q", Payload: make([]byte, 4000)}, func(_ bool, err error) { errs <- err })
	}
	for range n {
		if err := testutil.Recv(t, errs, "an append's outcome"); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	err := j.Load(func(job *store.Job) error {
		if want := fmt.Sprintf("m%04d", i); job.MsgID != want {
			return fmt.Errorf("job %d is %s, want %s", i, job.MsgID, want)
		}
		i++
		return nil
	})
	if err != nil || i != n {
		t.Fatalf("loaded %d of %d: %v", i, n, err)
	}
}

// TestEtcdGuardFences: once the guard is false (another broker leads),
// the write that finds out and every later one fail with ErrFenced and
// store nothing.
func TestEtcdGuardFences(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	ctx := context.Background()
	put, err := cli.Put(ctx, "/leader", "me")
	if err != nil {
		t.Fatal(err)
	}
	opts := etcdstore.DefaultOptions()
	opts.Guard = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/leader"), "=", put.Header.Revision)}
	j := openEtcd(t, cli, opts)
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "a", Queue: "q"}, done) }); err != nil {
		t.Fatalf("append while leading: %v", err)
	}
	if _, err := cli.Delete(ctx, "/leader"); err != nil { // its lease ended
		t.Fatal(err)
	}
	for _, id := range []string{"b", "c"} {
		if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: id, Queue: "q"}, done) }); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("append %s after the leadership went: %v, want ErrFenced", id, err)
		}
	}
	// A duplicate changes nothing, but its answer gates an ACK: it too
	// asks the guard.
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "a", Queue: "q"}, done) }); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append of a stored msgid after the leadership went: %v, want ErrFenced", err)
	}
	if !errors.Is(j.Fenced(), store.ErrFenced) {
		t.Fatalf("Fenced() = %v", j.Fenced())
	}
	resp, err := cli.Get(ctx, "/emq/slot/", clientv3.WithPrefix(), clientv3.WithCountOnly()) // the jobs
	if err != nil || resp.Count != 1 {
		t.Fatalf("jobs stored: %d (%v), want only a", resp.Count, err)
	}
}

// TestEtcdTooLarge: a job over the size one etcd request carries is
// refused by name of the limit; the options refuse a limit over it.
func TestEtcdTooLarge(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	j := openEtcd(t, cli, opts)
	_, err := store.Wait(func(done func(bool, error)) {
		j.Append(&store.Job{MsgID: "big", Queue: "q", Payload: make([]byte, opts.MaxJobSize+1)}, done)
	})
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(opts.MaxJobSize)) {
		t.Fatalf("append over the limit: %v", err)
	}
	opts.MaxJobSize = 2 << 20
	if _, err := etcdstore.Open(cli, opts); err == nil || !strings.Contains(err.Error(), "etcd request") {
		t.Fatalf("open with a 2 MiB job limit: %v", err)
	}
}

// TestEtcdCompactsItsHistory: the journal compacts etcd's history to the
// revision of one period before, so job churn does not pile up in etcd.
func TestEtcdCompactsItsHistory(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.CompactEvery = 50 * time.Millisecond
	j := openEtcd(t, cli, opts)
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "a", Queue: "q"}, done) }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := cli.Get(ctx, "/emq/slot/1") // a's
	if err != nil {
		t.Fatal(err)
	}
	first := resp.Header.Revision
	if _, err := store.Wait(func(done func(bool, error)) { j.Complete("a", nil, time.Time{}, nil, done) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cli.Get(ctx, "/emq/slot/1", clientv3.WithRev(first))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d still readable after 10 s (%v): history not compacted", first, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEtcdWritesFitOneRequest: a result too large to keep beside its job
// in one etcd request is not kept, and the job still completes; a
// schedule whose fire would not fit is refused.
func TestEtcdWritesFitOneRequest(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	j := openEtcd(t, cli, opts)
	big := make([]byte, opts.MaxJobSize-100)
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "big", Queue: "q", Payload: big}, done) }); err != nil {
		t.Fatal(err)
	}
	found, err := store.Wait(func(done func(bool, error)) {
		j.Complete("big", make([]byte, 64<<10), time.Now().Add(time.Hour), nil, done)
	})
	if !found || err != nil {
		t.Fatalf("complete with a result too large to keep: %v %v, want found", found, err)
	}
	if _, err := j.Get("big"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the job after its complete: %v, want gone", err)
	}
	_, err = store.Wait(func(done func(bool, error)) {
		j.PutSchedule(&store.Schedule{ID: "s", Queue: "q", Payload: make([]byte, opts.MaxJobSize-1000), Every: time.Minute, Next: time.Now()}, done)
	})
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("a schedule whose fire would not fit: %v, want ErrTooLarge", err)
	}
}

// TestEtcdCompactionSparesLongReads: while a Load reads at its revision,
// the journal's compaction goes no further than that revision, however
// much is written meanwhile.
func TestEtcdCompactionSparesLongReads(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.CompactEvery = 20 * time.Millisecond
	j := openEtcd(t, cli, opts)
	for i := range 300 { // more than Load reads at once
		if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: fmt.Sprintf("m%03d", i), Queue: "q"}, done) }); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	resp, err := cli.Get(ctx, "/emq/meta/format")
	if err != nil {
		t.Fatal(err)
	}
	pin := resp.Header.Revision // what the Load below reads at
	n := 0
	err = j.Load(func(*store.Job) error {
		if n++; n > 1 {
			return nil
		}
		for i := range 20 { // the revision moves on
			if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: fmt.Sprintf("w%d", i), Queue: "w"}, done) }); err != nil {
				return err
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for { // the compactor has run up to the Load's revision
			if _, err := cli.Get(ctx, "/emq/meta/format", clientv3.WithRev(pin-1)); errors.Is(err, rpctypes.ErrCompacted) {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("no compaction within 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err != nil || n < 300 {
		t.Fatalf("Load while compacting: %d jobs, %v", n, err)
	}
}

// etcd answers ErrNoSpace to a transaction that passed its quota check
// before Raft and failed it when applied, and applies it all the same:
// the journal reads its keys to tell, and an answer they cannot give is
// unknown (the broker then stops, and the next leader loads what etcd has).
func TestEtcdTellsWhetherARefusedWriteApplied(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	j := openEtcd(t, cli, etcdstore.DefaultOptions())
	ctx := context.Background()
	for _, kv := range [][2]string{{"/t/a", "1"}, {"/t/c", "x"}} {
		if _, err := cli.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name           string
		ops            []clientv3.Op
		applied, known bool
	}{
		{"every put there, every delete gone", []clientv3.Op{clientv3.OpPut("/t/a", "1"), clientv3.OpDelete("/t/b")}, true, true},
		{"no put there, no delete gone", []clientv3.Op{clientv3.OpPut("/t/a", "2"), clientv3.OpDelete("/t/c")}, false, true},
		{"some of each", []clientv3.Op{clientv3.OpPut("/t/a", "1"), clientv3.OpPut("/t/new", "y")}, false, false},
		{"a range", []clientv3.Op{clientv3.OpDelete("/t/", clientv3.WithPrefix())}, false, false},
	} {
		if applied, known := j.AppliedAnyway(c.ops); applied != c.applied || known != c.known {
			t.Errorf("%s: applied %v known %v, want %v %v", c.name, applied, known, c.applied, c.known)
		}
	}
}

// TestEtcdFullIsNotFenced: etcd at its space quota refuses writes; the
// journal says so, is not fenced (a refused write did not land; one that
// landed all the same was ACKed), and what was stored is all there.
func TestEtcdFullIsNotFenced(t *testing.T) {
	cli := etcdClient(t, etcdtest.StartWith(t, 1, etcdtest.Config{QuotaBytes: 4 << 20}))
	j := openEtcd(t, cli, etcdstore.DefaultOptions())
	stored := 0
	var err error
	for i := 0; err == nil && i < 1000; i++ {
		_, err = store.Wait(func(done func(bool, error)) {
			j.Append(&store.Job{MsgID: fmt.Sprintf("m%04d", i), Queue: "q", Payload: make([]byte, 64<<10)}, done)
		})
		if err == nil {
			stored++
		}
	}
	if err == nil || errors.Is(err, store.ErrFenced) || !strings.Contains(err.Error(), "space exceeded") {
		t.Fatalf("append into a full etcd: %v; want a refusal naming its space, not a fence", err)
	}
	if j.Fenced() != nil {
		t.Fatalf("fenced: %v", j.Fenced())
	}
	counts, cerr := j.Counts()
	if cerr != nil || len(counts) != 1 || counts[0].Pending != stored {
		t.Fatalf("after the refusal: %+v %v, want %d pending", counts, cerr, stored)
	}
}

// TestEtcdPipelinedRefusals: batches commit overlapped while etcd fills
// up and refuses some. A batch that read what a refused batch wrote (the
// same msgid sent twice at once) fails with it, so no answer rests on a
// write that did not land: every job answered stored is stored, the
// counts agree, and the shadow the commits made is what etcd holds.
func TestEtcdPipelinedRefusals(t *testing.T) {
	cli := etcdClient(t, etcdtest.StartWith(t, 1, etcdtest.Config{QuotaBytes: 4 << 20}))
	opts := etcdstore.DefaultOptions()
	opts.Pipeline = 8
	j, err := etcdstore.Open(cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stored  = map[string]bool{}
		refused int
	)
	// Rounds of appends at once until etcd refuses some (its size is
	// known to its quota once its backend commits).
	for i := 0; refusedNow(&mu, &refused) == 0 && i < 20000; i++ {
		if i%200 == 199 {
			wg.Wait()
		}
		for range 2 {
			wg.Go(func() {
				id := fmt.Sprintf("m%04d", i)
				_, err := store.Wait(func(done func(bool, error)) {
					j.Append(&store.Job{MsgID: id, Queue: "q", Payload: make([]byte, 64<<10)}, done)
				})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					stored[id] = true
				} else {
					refused++
				}
			})
		}
	}
	wg.Wait()
	if refused == 0 || len(stored) == 0 || j.Fenced() != nil {
		t.Fatalf("%d stored, %d refused, fenced %v: want some of each, not fenced", len(stored), refused, j.Fenced())
	}
	t.Logf("%d jobs stored, %d appends refused", len(stored), refused)
	for id := range stored {
		if _, err := j.Get(id); err != nil {
			t.Fatalf("job %s, answered stored: %v", id, err)
		}
	}
	counts, err := j.Counts()
	if err != nil || len(counts) != 1 || counts[0].Pending != len(stored) {
		t.Fatalf("counts %+v, %v; want %d pending", counts, err, len(stored))
	}
	j.Close()
	sameShadow(t, cli, opts, j)
}

func refusedNow(mu *sync.Mutex, n *int) int {
	mu.Lock()
	defer mu.Unlock()
	return *n
}

// A prefix of an older format (1: before unique keys and cancelled
// jobs; 3: state indexes stored in etcd) is brought to format 4 when
// opened for writing: its index keys leave etcd, its jobs stay, and the
// indexes are derived from them. A format this binary does not know is
// refused, by name.
func TestOlderFormatsAreUpgradedAndNewerRefused(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.Prefix = "/old/"
	ctx := context.Background()
	for _, old := range []string{"1", "3", "4"} {
		j, err := etcdstore.Open(cli, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "m" + old, Queue: "q"}, done) }); err != nil {
			t.Fatal(err)
		}
		j.Close()
		// What an older broker stored: the job at its own key (not in a
		// slot), its index entry beside it, and one naming a job long
		// gone.
		slots, err := cli.Get(ctx, "/old/slot/", clientv3.WithPrefix())
		if err != nil || len(slots.Kvs) != 1 {
			t.Fatalf("the job's slot: %v, %v", slots, err)
		}
		id, rec, err := etcdstore.UnwrapJob(slots.Kvs[0].Value)
		if err != nil || string(id) != "m"+old {
			t.Fatalf("the slot holds %q, %v; want m%s", id, err, old)
		}
		if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(string(slots.Kvs[0].Key)), clientv3.OpPut("/old/jobs/m"+old, string(rec))).Commit(); err != nil {
			t.Fatal(err)
		}
		ib, ik, err := store.IndexEntry([]byte("m"+old), rec)
		if err != nil || string(ib) != "pending" {
			t.Fatalf("index entry of m%s: %s, %v", old, ib, err)
		}
		for k, v := range map[string]string{"/old/pending/" + string(ik): "m" + old, "/old/dead/zz": "gone", "/old/meta/format": old} {
			if _, err := cli.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
		if j, err = etcdstore.Open(cli, opts); err != nil {
			t.Fatalf("open of a format %s prefix: %v", old, err)
		}
		var loaded []string
		if err := j.Load(func(jb *store.Job) error { loaded = append(loaded, jb.MsgID); return nil }); err != nil {
			t.Fatal(err)
		}
		if want := map[string][]string{"1": {"m1"}, "3": {"m1", "m3"}, "4": {"m1", "m3", "m4"}}[old]; !slices.Equal(loaded, want) {
			t.Fatalf("loaded from a format %s prefix: %v, want %v", old, loaded, want)
		}
		counts, err := j.Counts()
		if err != nil || len(counts) != 1 || counts[0].Dead != 0 {
			t.Fatalf("counts after the upgrade: %+v, %v; want no dead letter", counts, err)
		}
		j.Close()
		if resp, err := cli.Get(ctx, "/old/meta/format"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "5" {
			t.Fatalf("format after the open: %v, %v; want 5", resp, err)
		}
		for _, idx := range []string{"/old/pending/", "/old/dead/"} {
			if resp, err := cli.Get(ctx, idx, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
				t.Fatalf("keys under %s after the upgrade: %v, %v; want none", idx, resp, err)
			}
		}
	}
	// The jobs at their own keys end there; a new one takes a slot.
	j := openEtcd(t, cli, opts)
	if found, err := store.Wait(func(done func(bool, error)) { j.Complete("m1", nil, time.Time{}, nil, done) }); err != nil || !found {
		t.Fatalf("complete of m1, stored by format 4: %v, %v", found, err)
	}
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "m5", Queue: "q"}, done) }); err != nil {
		t.Fatal(err)
	}
	j.Close()
	for prefix, want := range map[string]int64{"/old/jobs/": 2, "/old/slot/": 1} {
		if resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != want {
			t.Fatalf("keys under %s: %v, %v; want %d", prefix, resp, err, want)
		}
	}
	if _, err := cli.Put(ctx, "/old/meta/format", "7"); err != nil { // 6 is an encrypted journal's
		t.Fatal(err)
	}
	if _, err := etcdstore.Open(cli, opts); !errors.Is(err, store.ErrTooNew) || !strings.Contains(err.Error(), "/old/") {
		t.Fatalf("open of a format 7 prefix: %v; want ErrTooNew naming the prefix", err)
	}
}

// TestEtcdJobTakesAnEndedJobsSlot: a job appended in the commit that
// completes another is put over the ended job's key, so a job's life
// costs one put; a standby that followed it, and a fresh load, see the
// new job there.
func TestEtcdJobTakesAnEndedJobsSlot(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	ctx := context.Background()
	opts := etcdstore.DefaultOptions()
	opts.Prefix = "/slots/"
	opts.LazyDelay = time.Second // the complete waits for the append to share its commit
	j, err := etcdstore.Open(cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	warm := etcdstore.StartWarm(cli, opts)
	defer warm.Stop()
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "a", Queue: "q", Payload: []byte("A")}, done) }); err != nil {
		t.Fatal(err)
	}
	slotOf := func(want string) *mvccpb.KeyValue {
		t.Helper()
		if resp, err := cli.Get(ctx, "/slots/jobs/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
			t.Fatalf("keys under jobs/: %v, %v; want none (jobs live in slots)", resp, err)
		}
		resp, err := cli.Get(ctx, "/slots/slot/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("slots: %v, %v; want one", resp, err)
		}
		if id, _, err := etcdstore.UnwrapJob(resp.Kvs[0].Value); err != nil || string(id) != want {
			t.Fatalf("the slot holds %q, %v; want %s", id, err, want)
		}
		return resp.Kvs[0]
	}
	first := slotOf("a")
	completed := make(chan error, 1)
	j.Complete("a", nil, time.Time{}, nil, func(found bool, err error) {
		if err == nil && !found {
			err = errors.New("a not found")
		}
		completed <- err
	})
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: "b", Queue: "q", Payload: []byte("B")}, done) }); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, completed, "a's Complete"); err != nil {
		t.Fatal(err)
	}
	second := slotOf("b")
	if string(second.Key) != string(first.Key) || second.Version != 2 {
		t.Fatalf("b went to %s (version %d); want %s put over (version 2)", second.Key, second.Version, first.Key)
	}
	j.Close()

	// Taken over from the standby's copy, which saw a end and b start in
	// one put.
	o := opts
	o.Warm = warm
	o.OnWarmMissed = func(err error) { t.Errorf("the journal was read, not taken from the standby's copy: %v", err) }
	j = openEtcd(t, cli, o)
	var loaded []string
	if err := j.Load(func(jb *store.Job) error { loaded = append(loaded, jb.MsgID); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded, []string{"b"}) {
		t.Fatalf("loaded %v; want b", loaded)
	}
	if jb, err := j.Get("b"); err != nil || string(jb.Payload) != "B" {
		t.Fatalf("b's payload: %+v, %v; want B", jb, err)
	}
	sameShadow(t, cli, opts, j)
	// Alone in its commit, a complete deletes the slot.
	if found, err := store.Wait(func(done func(bool, error)) { j.Complete("b", nil, time.Time{}, nil, done) }); err != nil || !found {
		t.Fatalf("complete of b: %v, %v", found, err)
	}
	if resp, err := cli.Get(ctx, "/slots/slot/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("slots after the last complete: %v, %v; want none", resp, err)
	}
}

// TestEtcdIdleJournalReadsPastOthersCompaction: two journals on one etcd
// (shards sharing a cluster). While one writes, its compaction passes the
// other's last write; the idle one still reads its jobs, payloads and
// listings, since it reads at etcd's latest revision while it writes
// nothing.
func TestEtcdIdleJournalReadsPastOthersCompaction(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	optsA, optsB := etcdstore.DefaultOptions(), etcdstore.DefaultOptions()
	optsA.Prefix, optsB.Prefix = "/emq/a/journal/", "/emq/b/journal/"
	optsA.CompactEvery, optsB.CompactEvery = 40*time.Millisecond, 40*time.Millisecond
	jb := openEtcd(t, cli, optsB)
	if _, err := store.Wait(func(done func(bool, error)) {
		jb.Append(&store.Job{MsgID: "b1", Queue: "q", Payload: []byte("kept")}, done)
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := cli.Get(ctx, optsB.Prefix+"slot/", clientv3.WithPrefix()) // b1's
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("b1 in etcd: %v", err)
	}
	written, b1 := resp.Kvs[0].ModRevision, string(resp.Kvs[0].Key)
	ja := openEtcd(t, cli, optsA)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprint("a", i)
		if _, err := store.Wait(func(done func(bool, error)) { ja.Append(&store.Job{MsgID: id, Queue: "q"}, done) }); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Wait(func(done func(bool, error)) { ja.Complete(id, nil, time.Time{}, nil, done) }); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Get(ctx, b1, clientv3.WithRev(written)); errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy journal's compaction did not pass the idle one's write in 20 s")
		}
	}
	j, err := jb.Get("b1")
	if err != nil || string(j.Payload) != "kept" {
		t.Fatalf("the idle journal's job after the other's compaction: %+v, %v", j, err)
	}
	page, err := jb.List(store.ListOptions{Queue: "q"})
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("the idle journal's listing after the other's compaction: %+v, %v", page, err)
	}
}

// TestEtcdGathersSendersIntoOneCommit: senders that each wait for their
// write before the next share one commit a round (Gather), rather than
// settling into groups that take turns; a lone sender never waits for
// company.
func TestEtcdGathersSendersIntoOneCommit(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	var commits atomic.Int64
	opts := etcdstore.DefaultOptions()
	opts.Prefix, opts.Gather = "/gather/", 250*time.Millisecond
	opts.OnCommit = func(int, time.Duration) { commits.Add(1) }
	j := openEtcd(t, cli, opts)
	const senders, rounds = 8, 10
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for r := range rounds {
				_, err := store.Wait(func(done func(bool, error)) {
					j.Append(&store.Job{MsgID: fmt.Sprintf("s%d-%d", s, r), Queue: "q", Payload: []byte("x")}, done)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The first round may split while the senders start; a straggler
	// later than the gap costs one more.
	if n := commits.Load(); n > rounds+4 {
		t.Fatalf("%d senders × %d rounds took %d commits, want about %d", senders, rounds, n, rounds)
	}

	// Waiting, it would take a second an append at least.
	opts.Prefix, opts.Gather = "/lone/", time.Second
	lone := openEtcd(t, cli, opts)
	done := make(chan error, 1)
	go func() {
		for r := range 10 {
			if _, err := store.Wait(func(done func(bool, error)) {
				lone.Append(&store.Job{MsgID: fmt.Sprintf("l%d", r), Queue: "q", Payload: []byte("x")}, done)
			}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(9 * time.Second):
		t.Fatal("a lone sender waited for company (Gather) it could not have")
	}
}

// TestEtcdPairsEndedAndNewJobsAcrossABatch: a batch that ends 200 jobs
// and then puts 200 new ones (the order a busy broker's completes and
// appends often come in) commits 200 puts over the ended jobs' slots
// and no delete, in as few transactions as etcd's limit allows.
func TestEtcdPairsEndedAndNewJobsAcrossABatch(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.Prefix = "/pairs/"
	j := openEtcd(t, cli, opts)
	const n = 200
	recs := make([][]byte, n)
	for i := range n {
		id := fmt.Sprint("old", i)
		if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: id, Queue: "q"}, done) }); err != nil {
			t.Fatal(err)
		}
		rec, err := j.Record(id)
		if err != nil || rec == nil {
			t.Fatalf("record of %s: %q, %v", id, rec, err)
		}
		recs[i] = rec
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, err := cli.Get(ctx, "/pairs/meta/format")
	if err != nil {
		t.Fatal(err)
	}
	wch := cli.Watch(ctx, "/pairs/slot/", clientv3.WithPrefix(), clientv3.WithRev(now.Header.Revision+1))
	err = j.Batch(func(tx store.Tx, mark func() error) error {
		for i := range n {
			if err := tx.Delete(store.BucketJobs, []byte(fmt.Sprint("old", i))); err != nil {
				return err
			}
			if err := mark(); err != nil {
				return err
			}
		}
		for i := range n {
			if err := tx.Put(store.BucketJobs, []byte(fmt.Sprint("new", i)), recs[i]); err != nil {
				return err
			}
			if err := mark(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	puts, deletes, revs := 0, 0, map[int64]bool{}
	for puts+deletes < n {
		select {
		case resp := <-wch:
			for _, ev := range resp.Events {
				revs[ev.Kv.ModRevision] = true
				if ev.Type == clientv3.EventTypeDelete {
					deletes++
				} else {
					puts++
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after 10 s the watch saw %d puts and %d deletes", puts, deletes)
		}
	}
	if puts != n || deletes != 0 || len(revs) > 2 {
		t.Fatalf("etcd took %d puts, %d deletes in %d transactions; want %d puts, no delete, in 2 (128 operations a transaction)", puts, deletes, len(revs), n)
	}
	for i := range n {
		if got, err := j.Record(fmt.Sprint("new", i)); err != nil || string(got) != string(recs[i]) {
			t.Fatalf("new%d: %q, %v", i, got, err)
		}
		if got, err := j.Record(fmt.Sprint("old", i)); err != nil || got != nil {
			t.Fatalf("old%d after its delete: %q, %v", i, got, err)
		}
	}
}

// TestEtcdHoldsACompleteOverForTheNextAppend: a batch with more
// Completes than Appends (here two of one, one of the other) holds the
// Complete its Append cannot pair with over to a later batch, where the
// next job's put takes its slot: two jobs ended and two stored in two
// puts, no delete. Without the hold the second Complete costs a delete.
func TestEtcdHoldsACompleteOverForTheNextAppend(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	for _, hold := range []bool{true, false} {
		t.Run(fmt.Sprint("hold=", hold), func(t *testing.T) {
			opts := etcdstore.DefaultOptions()
			opts.Prefix = fmt.Sprintf("/hold%v/", hold)
			opts.LazyDelay = time.Second // a held Complete waits for the next Append (the longest allowed)
			opts.HoldCompletes = 0
			if hold {
				opts.HoldCompletes = time.Second
			}
			j := openEtcd(t, cli, opts)
			appendJob(t, j, "a")
			appendJob(t, j, "c")
			events := watchSlots(t, cli, opts.Prefix)
			completed := make(chan string, 2)
			stalled := stallCommitter(t, j)
			for _, id := range []string{"a", "c"} {
				j.Complete(id, nil, time.Time{}, nil, func(found bool, err error) {
					if !found || err != nil {
						t.Errorf("complete %s: found %v, %v", id, found, err)
					}
					completed <- id
				})
			}
			j.Append(&store.Job{MsgID: "b", Queue: "q"}, nil)
			close(stalled)
			if id := testutil.Recv(t, completed, "a Complete"); id != "a" {
				t.Fatalf("%s completed first; want a, with b's commit", id)
			}
			want := []string{"put b", "delete", "put d"} // c's own delete
			if hold {
				select {
				case id := <-completed:
					t.Fatalf("%s completed before a job came to take its slot", id)
				default:
				}
				want = []string{"put b", "put d"}
			} else {
				testutil.Recv(t, completed, "c's Complete")
			}
			appendJob(t, j, "d")
			if hold {
				testutil.Recv(t, completed, "c's Complete, held until d")
			}
			if got := events(len(want)); !slices.Equal(got, want) {
				t.Fatalf("etcd took %q; want %q", got, want)
			}
			for id, want := range map[string]bool{"a": false, "b": true, "c": false, "d": true} {
				if rec, err := j.Record(id); err != nil || (rec != nil) != want {
					t.Fatalf("%s stored: %v, %v; want %v", id, rec != nil, err, want)
				}
			}
		})
	}
}

// TestEtcdHeldCompletesKeepTheirOrder: a Complete is not held past an
// Append of its own msgid (the job sent again once it ended is a new
// job, not a duplicate), and a held one is written when the journal
// closes, however long LazyDelay.
func TestEtcdHeldCompletesKeepTheirOrder(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.Prefix = "/order/"
	opts.LazyDelay = time.Second
	j, err := etcdstore.Open(cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendJob(t, j, "a")
	appendJob(t, j, "c")
	appendJob(t, j, "e")
	stalled := stallCommitter(t, j)
	errs := make(chan error, 4)
	done := func(_ bool, err error) { errs <- err }
	j.Complete("c", nil, time.Time{}, nil, done)
	j.Complete("a", nil, time.Time{}, nil, done)
	var dup bool
	j.Append(&store.Job{MsgID: "a", Queue: "q", Payload: []byte("again")}, func(d bool, err error) { dup = d; errs <- err })
	close(stalled)
	for range 3 {
		if err := testutil.Recv(t, errs, "an outcome"); err != nil {
			t.Fatal(err)
		}
	}
	if rec, err := j.Record("a"); err != nil || dup || rec == nil {
		t.Fatalf("a sent again after its Complete: duplicate %v, stored %v, %v; want a new job, stored", dup, rec != nil, err)
	}
	j.Complete("e", nil, time.Time{}, nil, done) // alone: held over, then waits LazyDelay
	j.Close()
	if err := testutil.Recv(t, errs, "the held Complete's outcome"); err != nil {
		t.Fatalf("a held Complete at Close: %v", err)
	}
	j = openEtcd(t, cli, opts)
	if rec, err := j.Record("e"); err != nil || rec != nil {
		t.Fatalf("e after its Complete and Close: stored %v, %v", rec != nil, err)
	}
}

// TestEtcdHeldCompleteIsWrittenAlone: a Complete that no job comes to
// pair with is deleted once its hold is up, not kept waiting.
func TestEtcdHeldCompleteIsWrittenAlone(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.Prefix = "/alone/"
	opts.LazyDelay, opts.HoldCompletes = time.Millisecond, 50*time.Millisecond
	j := openEtcd(t, cli, opts)
	appendJob(t, j, "a")
	events := watchSlots(t, cli, opts.Prefix)
	if found, err := store.Wait(func(done func(bool, error)) { j.Complete("a", nil, time.Time{}, nil, done) }); !found || err != nil {
		t.Fatalf("complete a: found %v, %v", found, err)
	}
	if got := events(1); !slices.Equal(got, []string{"delete"}) {
		t.Fatalf("etcd took %q; want a's delete", got)
	}
}

// appendJob appends a job of queue q and waits until it is stored.
func appendJob(t *testing.T, j *etcdstore.Journal, id string) {
	t.Helper()
	if _, err := store.Wait(func(done func(bool, error)) { j.Append(&store.Job{MsgID: id, Queue: "q"}, done) }); err != nil {
		t.Fatal(err)
	}
}

// stallCommitter holds the journal's committer until the channel it
// returns is closed, so that the writes queued meanwhile make one batch.
func stallCommitter(t *testing.T, j *etcdstore.Journal) chan struct{} {
	stalled, running := make(chan struct{}), make(chan struct{})
	j.Alone(func() { close(running); <-stalled }, func(err error) { t.Errorf("stall: %v", err) })
	testutil.Recv(t, running, "the committer held")
	return stalled
}

// watchSlots watches the slots under prefix from now on; the function it
// returns waits for n changes and names them ("put MSGID", "delete").
func watchSlots(t *testing.T, cli *clientv3.Client, prefix string) func(n int) []string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	now, err := cli.Get(ctx, prefix+"meta/format")
	if err != nil {
		t.Fatal(err)
	}
	wch := cli.Watch(ctx, prefix+"slot/", clientv3.WithPrefix(), clientv3.WithRev(now.Header.Revision+1))
	return func(n int) []string {
		t.Helper()
		var got []string
		for len(got) < n {
			select {
			case resp := <-wch:
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypeDelete {
						got = append(got, "delete")
						continue
					}
					id, _, err := etcdstore.UnwrapJob(ev.Kv.Value)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, "put "+string(id))
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("after 10 s the watch saw %q; want %d changes", got, n)
			}
		}
		return got
	}
}

// TestEtcdDoesNotHoldCompletesOfWorkflows: a journal that holds a batch
// (found when it opens, or opened since) holds no Complete over: each
// settles what waits for its job or batch in its own commit.
func TestEtcdDoesNotHoldCompletesOfWorkflows(t *testing.T) {
	cli := etcdClient(t, etcdtest.Start(t, 1))
	opts := etcdstore.DefaultOptions()
	opts.Prefix = "/flows/"
	opts.LazyDelay, opts.HoldCompletes = time.Second, time.Second
	for _, reopened := range []bool{false, true} {
		commits := make(chan int, 16)
		opts.OnCommit = func(writes int, _ time.Duration) { commits <- writes }
		j, err := etcdstore.Open(cli, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !reopened {
			if _, err := store.Wait(func(done func(*store.Batch, error)) { j.OpenBatch("b", false, done) }); err != nil {
				t.Fatal(err)
			}
		}
		appendJob(t, j, "a")
		appendJob(t, j, "c")
		for len(commits) > 0 {
			<-commits
		}
		stalled := stallCommitter(t, j)
		errs := make(chan error, 3)
		done := func(_ bool, err error) { errs <- err }
		j.Complete("a", nil, time.Time{}, nil, done)
		j.Complete("c", nil, time.Time{}, nil, done)
		j.Append(&store.Job{MsgID: "n", Queue: "q"}, done)
		close(stalled)
		if n := testutil.Recv(t, commits, "the first commit after the stall"); n != 3 {
			t.Fatalf("reopened %v: the first commit after the stall carried %d writes; want all 3 (no Complete held)", reopened, n)
		}
		for range 3 {
			if err := testutil.Recv(t, errs, "an outcome"); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
	}
}
