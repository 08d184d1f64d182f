package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// brokerWithJobs runs a broker with an admin API and jobs in every state:
// one dead, one in flight, one pending, on queue q.
func brokerWithJobs(t *testing.T, token string) (b *bt.Broker, dead, inflight, pending string) {
	t.Helper()
	b = bt.StartAdmin(t, "", fastBroker, bt.Token(token))
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	dead = client.Request("q", "retry-count:0", []byte("doomed"))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: dead, Reason: "broken for good"})
	bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == 1 })
	inflight = client.Request("q", "", []byte("running"))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	pending = client.Request("q", "", []byte("waiting"))
	return
}

func mustEmq(t testing.TB, args ...string) string {
	t.Helper()
	out, stderr, err := emq(t, "", args...)
	if err != nil {
		t.Fatalf("emq %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func TestAdminCLIOnline(t *testing.T) {
	t.Parallel()
	b, dead, inflight, pending := brokerWithJobs(t, "tok")
	on := []string{"--admin", b.AdminAddr(), "--admin-token", "tok"}

	var queues []broker.QueueInfo
	json.Unmarshal([]byte(mustEmq(t, append([]string{"queues", "--json"}, on...)...)), &queues)
	if len(queues) != 1 || queues[0].Pending != 1 || queues[0].InFlight != 1 || queues[0].Dead != 1 || queues[0].Workers != 1 {
		t.Fatalf("queues: %+v", queues)
	}
	if out := mustEmq(t, append([]string{"workers"}, on...)...); !strings.Contains(out, "w ") || !strings.Contains(out, "FREE SLOTS") {
		t.Fatalf("workers table:\n%s", out)
	}
	// emq stats: every counter by its API name, in the API's order, then
	// every ERROR code.
	stats := strings.Split(mustEmq(t, append([]string{"stats"}, on...)...), "\n")
	var want []string
	for _, c := range (broker.Stats{}).Counters() {
		want = append(want, c.Name)
	}
	want = append(want, admin.PubSubCounters...) // its broker has pub/sub on
	for _, code := range broker.ErrorCodes() {
		want = append(want, broker.ErrorsName+" "+code)
	}
	for i, name := range want {
		if i >= len(stats) || !strings.HasPrefix(stats[i], name+" ") {
			t.Fatalf("stats line %d: want %q first:\n%s", i, name, strings.Join(stats, "\n"))
		}
	}
	for _, line := range stats {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "dead_lettered" && f[1] != "1" {
			t.Fatalf("stats: %q, want dead_lettered 1", line)
		}
	}
	for state, id := range map[string]string{"dead": dead, "inflight": inflight, "pending": pending} {
		var page admin.JobPage
		json.Unmarshal([]byte(mustEmq(t, append([]string{"jobs", "ls", "--state", state, "--json"}, on...)...)), &page)
		ids := []string{}
		for _, j := range page.Jobs {
			if j.State == state {
				ids = append(ids, j.MsgID)
			}
		}
		if !strings.Contains(strings.Join(ids, " "), id) {
			t.Errorf("jobs ls --state %s: %v, want %s", state, ids, id)
		}
	}
	if out := mustEmq(t, append([]string{"jobs", "show", dead, "--payload"}, on...)...); !strings.Contains(out, "broken for good") || !strings.Contains(out, `"doomed"`) {
		t.Fatalf("jobs show:\n%s", out)
	}
	if out := mustEmq(t, append([]string{"dlq", "ls"}, on...)...); !strings.Contains(out, dead) {
		t.Fatalf("dlq ls:\n%s", out)
	}
	mustEmq(t, append([]string{"dlq", "retry", dead}, on...)...)
	mustEmq(t, append([]string{"jobs", "rm", pending}, on...)...)
	// An unknown msgid is named once, online as offline.
	for _, args := range [][]string{{"jobs", "rm", pending}, {"dlq", "retry", pending}} {
		_, stderr, err := emq(t, "", append(args, on...)...)
		if err == nil || !strings.Contains(stderr, "no such job: "+pending) || strings.Count(stderr, pending) != 1 {
			t.Fatalf("%v of a removed job: %v %s", args, err, stderr)
		}
	}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "purge", "--queue", "q"}, on...)...); err == nil || !strings.Contains(stderr, "--yes") {
		t.Fatalf("purge without --yes: %v %s", err, stderr)
	}
	if out := mustEmq(t, append([]string{"jobs", "purge", "--queue", "q", "--yes"}, on...)...); !strings.Contains(out, "removed 2") {
		t.Fatalf("purge: %s", out) // the in-flight one and the retried one
	}
	if out := mustEmq(t, append([]string{"compact"}, on...)...); !strings.Contains(out, "compacted") {
		t.Fatalf("compact: %s", out)
	}

	// Errors say what went wrong.
	_, stderr, err := emq(t, "", "queues", "--admin", b.AdminAddr(), "--admin-token", "nope")
	if err == nil || !strings.Contains(stderr, "refused the admin token") {
		t.Fatalf("wrong token: %v %s", err, stderr)
	}
	free := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	_, stderr, err = emq(t, "", "queues", "--admin", free)
	if err == nil || !strings.Contains(stderr, "no broker answered at http://"+free) {
		t.Fatalf("nothing there: %v %s", err, stderr)
	}
	_, stderr, err = emq(t, "", "queues", "--data-dir", b.Dir)
	if err == nil || !strings.Contains(stderr, "in use by a running broker") || !strings.Contains(stderr, "--admin") {
		t.Fatalf("locked journal: %v %s", err, stderr)
	}
}

func TestAdminCLIOffline(t *testing.T) {
	t.Parallel()
	b, dead, inflight, pending := brokerWithJobs(t, "")
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	off := []string{"--data-dir", b.Dir}
	out := mustEmq(t, append([]string{"queues"}, off...)...)
	if !strings.Contains(out, "q      2        0        0          1") {
		t.Fatalf("offline queues (in flight counts as pending when no broker runs):\n%s", out)
	}
	out = mustEmq(t, append([]string{"jobs", "ls"}, off...)...)
	for _, id := range []string{dead, inflight, pending} {
		if !strings.Contains(out, id) {
			t.Fatalf("offline jobs ls lacks %s:\n%s", id, out)
		}
	}
	if _, stderr, err := emq(t, "", append([]string{"workers"}, off...)...); err == nil || !strings.Contains(stderr, "running broker") {
		t.Fatalf("offline workers: %v %s", err, stderr)
	}
	if out := mustEmq(t, append([]string{"dlq", "retry", "--all"}, off...)...); out != "1 dead jobs match; add --yes to retry them\n" {
		t.Fatalf("dlq retry --all without --yes: %q", out)
	}
	if out := mustEmq(t, append([]string{"dlq", "retry", "--all", "--yes"}, off...)...); out != "retried 1 of 1 matching dead jobs\n" {
		t.Fatalf("dlq retry --all --yes: %q", out)
	}
	mustEmq(t, append([]string{"jobs", "rm", pending}, off...)...)
	if _, stderr, err := emq(t, "", append([]string{"jobs", "rm", pending}, off...)...); err == nil || !strings.Contains(stderr, "no such job") {
		t.Fatalf("rm twice: %v %s", err, stderr)
	}
	var page admin.JobPage
	json.Unmarshal([]byte(mustEmq(t, append([]string{"jobs", "ls", "--json"}, off...)...)), &page)
	if len(page.Jobs) != 2 || page.Jobs[0].State != "pending" || page.Jobs[1].State != "pending" {
		t.Fatalf("after retry and rm: %+v", page.Jobs)
	}
	missing := filepath.Join(t.TempDir(), "typo")
	if _, stderr, err := emq(t, "", "queues", "--data-dir", missing); err == nil || !strings.Contains(stderr, "no journal at") {
		t.Fatalf("a missing journal: %v %s", err, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("an admin command created a journal")
	}
	if out := mustEmq(t, "migrate", "status", "--data-dir", b.Dir); !strings.Contains(out, "applied") || strings.Contains(out, "pending") {
		t.Fatalf("migrate status:\n%s", out)
	}
	if out := mustEmq(t, "migrate", "up", "--data-dir", b.Dir); !strings.Contains(out, "already at version") {
		t.Fatalf("migrate up: %s", out)
	}
}

// emq compact on a journal that held 100,000 jobs of which 99,000 are
// done: the file shrinks by at least a quarter and the 1,000 left are intact.
func TestCompactCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, broker.JournalFile)
	j, err := boltstore.Open(path, boltstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	const total, kept = 100_000, 1_000
	ids := make([]string, total)
	errs := make(chan error, total)
	for i := range ids {
		ids[i] = emqp.NewID()
		j.Append(&store.Job{MsgID: ids[i], Queue: "q", Payload: []byte(fmt.Sprintf("payload %d %s", i, strings.Repeat("x", 100)))},
			func(_ bool, err error) { errs <- err })
	}
	for range total {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids[kept:] {
		j.Complete(id, nil, time.Time{}, nil, func(_ bool, err error) { errs <- err })
	}
	for range total - kept {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	before, _ := os.Stat(path)

	out := mustEmq(t, "compact", "--data-dir", dir)
	after, _ := os.Stat(path)
	t.Logf("%s(%d → %d bytes)", out, before.Size(), after.Size())
	// The log batches most of the churn away before bbolt sees it, so
	// the file holds less garbage than it once did; it must still shrink.
	if after.Size() >= before.Size()*3/4 {
		t.Fatalf("file went from %d to %d bytes", before.Size(), after.Size())
	}
	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	j, err = boltstore.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	n := 0
	err = j.Load(func(job *store.Job) error {
		if job.MsgID != ids[n] {
			return fmt.Errorf("job %d: %s, want %s", n, job.MsgID, ids[n])
		}
		n++
		return nil
	})
	if err != nil || n != kept {
		t.Fatalf("after compact: %d jobs, %v", n, err)
	}
	err = j.Payloads(ids[:kept], func(i int, p []byte, err error) {
		if want := fmt.Sprintf("payload %d %s", i, strings.Repeat("x", 100)); err != nil || string(p) != want {
			t.Errorf("after compact, job %d: %q %v", i, p, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
