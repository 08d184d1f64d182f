package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{Senders: 2, Window: 4, Slots: 2, Jobs: 300, Size: 10, Preload: 500})
	if err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 300 || r.Lost != 0 || r.Errors != 0 || r.JobsPerSec <= 0 || r.ReplaySec <= 0 {
		t.Fatalf("result %+v", r)
	}
	if r.AckP50 <= 0 || r.AckP50 > r.AckP99 || r.AckP99 > r.AckMax || r.E2EP50 < r.AckP50 {
		t.Fatalf("latencies out of order: %+v", r)
	}
	// Every job's append is committed before its ACK: the commits the run
	// reports hold at least one write a job.
	if r.CommitsPerJob <= 0 || r.CommitMeanMs <= 0 || r.CommitsPerJob*r.WritesPerCommit < 1 {
		t.Fatalf("journal commits: %+v", r)
	}
	b, _ := json.Marshal(r)
	var fields map[string]any
	json.Unmarshal(b, &fields)
	for _, k := range []string{"jobs", "seconds", "jobs_per_sec", "ack_p50_ms", "ack_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "lost", "commits_per_job", "commit_mean_ms", "writes_per_commit"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
}

func TestPaced(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{Senders: 2, Window: 2, Slots: 2, Jobs: 100, Rate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Lost != 0 || r.Seconds < 0.099 {
		t.Fatalf("100 jobs at 1,000 a second took %.3f s: %+v", r.Seconds, r)
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	d := make([]time.Duration, 0, 1100)
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	d = append(d, make([]time.Duration, 100)...) // not measured: ignored
	p50, p99, p999, mx := percentiles(d)
	if p50 != 500 || p99 != 990 || p999 != 999 || mx != 1000 {
		t.Fatalf("p50 %v p99 %v p99.9 %v max %v", p50, p99, p999, mx)
	}
	if p50, _, _, mx := percentiles(nil); p50 != 0 || mx != 0 {
		t.Fatal("percentiles of nothing")
	}
}

func TestRunPubSub(t *testing.T) {
	t.Parallel()
	r, err := RunPubSub(context.Background(), PubSubOptions{Subscribers: 3, Stuck: 1, Messages: 500, Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Delivered != 1500 || r.Expected != 1500 || r.DeliveriesPerS <= 0 || r.PublishPerS <= 0 {
		t.Fatalf("result %+v", r)
	}
	if r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.Max {
		t.Fatalf("latencies out of order: %+v", r)
	}
}

// With AckOnly the senders wait for ACKs only; every job still runs, and
// the enqueue→run times come from the worker.
func TestRunAckOnly(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), Options{Senders: 2, Window: 4, Slots: 2, Jobs: 300, Size: 10, AckOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.AckOnly || r.Lost != 0 || r.Errors != 0 || r.JobsPerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
	if r.AckP50 <= 0 || r.E2EP50 <= 0 || r.E2EP50 > r.E2EMax {
		t.Fatalf("latencies: %+v", r)
	}
}

// With Priorities and Unique every job the bench sends carries a priority
// (ten of them in turn) and a unique key of its own; all of them run.
func TestRunPriorityAndUnique(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.ResultTTL = time.Hour }) // the done jobs stay to be looked at
	const jobs = 60
	r, err := Run(context.Background(), Options{Frontend: b.Frontend(), Backend: b.Backend(), Senders: 2, Window: 4, Slots: 2,
		Jobs: jobs, Size: 10, Priorities: 10, Unique: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Priorities != 10 || !r.Unique || r.Lost != 0 || r.Errors != 0 || r.Duplicates != 0 {
		t.Fatalf("result %+v", r)
	}
	// A REPLY's delete may wait a little for company (LazyDelay): the
	// last jobs are done a moment after their REPLYs.
	var p store.Page
	bt.Eventually(t, "every job done", func() bool {
		p, err = b.List(store.ListOptions{Queue: "bench", State: store.Done, Limit: 1000})
		return err != nil || len(p.Jobs) == jobs
	})
	if err != nil {
		t.Fatal(err)
	}
	priorities, keys := map[uint16]int{}, map[string]bool{}
	for _, j := range p.Jobs {
		h, err := emqp.ParseHeaders(j.Headers)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := h.Priority()
		if err != nil || !h.Has(emqp.HeaderPriority) {
			t.Fatalf("job %s: headers %q: %v", j.MsgID, j.Headers, err)
		}
		priorities[pr]++
		if j.Unique != "" {
			keys[j.Unique] = true
		}
	}
	if len(p.Jobs) != jobs || len(priorities) != 10 || len(keys) != jobs {
		t.Fatalf("%d jobs done, %d priorities, %d unique keys: want %d, 10 and %d", len(p.Jobs), len(priorities), len(keys), jobs, jobs)
	}
}

// With BackupTo the bench backs its own broker up while it serves: the
// file is a whole backup holding at least the preloaded jobs, and the
// run says the jobs done a second before and during it. A run that ends
// first is an error, not a figure.
func TestRunBackup(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "b.emqbackup")
	r, err := Run(context.Background(), Options{Senders: 2, Window: 2, Slots: 2, Jobs: 2500, Rate: 1000, Size: 10, Preload: 500,
		BackupTo: path, BackupAfter: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Lost != 0 || r.BackupSec <= 0 || r.BackupBytes <= 0 || r.BeforeJobsPerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := store.CheckBackup(f)
	if err != nil || st.Jobs < 500 {
		t.Fatalf("the backup: %+v, %v; want at least the 500 preloaded jobs", st, err)
	}

	_, err = Run(context.Background(), Options{Senders: 1, Window: 1, Slots: 1, Jobs: 10, Size: 10,
		BackupTo: filepath.Join(t.TempDir(), "c.emqbackup"), BackupAfter: 1500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "more --jobs") {
		t.Fatalf("a run over before its backup: %v", err)
	}
}

// Options that cannot work are refused before anything starts, naming
// the flag.
func TestRunRefusesBadOptions(t *testing.T) {
	base := Options{Senders: 1, Slots: 1, Jobs: 1, Window: 1}
	for _, c := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Frontend, o.Preload = "tcp://127.0.0.1:1", 10 }, "--preload"},
		{func(o *Options) { o.Frontend, o.BackupTo = "tcp://127.0.0.1:1", "x" }, "--backup"},
		{func(o *Options) { o.BackupTo, o.BackupAfter = "x", time.Second }, "--backup-after"},
	} {
		o := base
		c.change(&o)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", o, err, c.want)
		}
	}
}
