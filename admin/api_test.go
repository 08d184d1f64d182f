package admin_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
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

// fixture is what each implementation of the API is checked on: in
// queue q a pending job, one in flight at worker w (pending, to a
// journal no broker holds) that reported its progress, a dead one and a
// done one kept with its result; and two pending jobs the first cases
// cancel: one with a priority and a unique key, one with header batch.
type fixture struct {
	pending, inflight, dead, done string
	cancel, batch                 string
}

// makeFixture stores the fixture in b.
func makeFixture(t *testing.T, b *bt.Broker) fixture {
	t.Helper()
	var f fixture
	client := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")
	f.dead = client.Request("q", "retry-count:0", []byte("doomed"))
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	w.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: f.dead, Reason: "boom"})
	bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == 1 })
	f.done = client.Request("q", "", []byte("finished"))
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	w.Reply(f.done, []byte("the result"))
	bt.Eventually(t, "replied", func() bool { return b.Stats().Replied == 1 })
	f.inflight = client.Request("q", "", []byte("running"))
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	w.Send(&emqp.Progress{MsgID: emqp.NewID(), OrigMsgID: f.inflight, Text: "40 resizing"})
	bt.Eventually(t, "progress taken", func() bool { return b.Stats().Progress == 1 })
	f.pending = client.Request("q", "", []byte("pending"))
	f.cancel = client.Request("q", "priority:7,unique:invoice-42,unique-for:60", []byte("to cancel"))
	f.batch = client.Request("q", "batch:1", []byte("to cancel in bulk"))
	return f
}

// impl is one implementation of the API on a fixture, and whether a
// running broker is behind it.
type impl struct {
	name   string
	online bool
	open   func(t *testing.T) (admin.API, fixture)
}

func keepResults(o *broker.Options) { bt.Fast(o); o.ResultTTL = time.Hour }

var impls = []impl{
	{"live", true, func(t *testing.T) (admin.API, fixture) {
		b := bt.Start(t, "", keepResults)
		return admin.NewLive(b.Broker, nil), makeFixture(t, b)
	}},
	{"client", true, func(t *testing.T) (admin.API, fixture) {
		b := bt.StartAdmin(t, "", keepResults, nil)
		c, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr()})
		if err != nil {
			t.Fatal(err)
		}
		return c, makeFixture(t, b)
	}},
	{"offline", false, func(t *testing.T) (admin.API, fixture) {
		b := bt.Start(t, "", keepResults)
		f := makeFixture(t, b)
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		j, err := boltstore.Open(filepath.Join(b.Dir, broker.JournalFile), boltstore.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		a := admin.NewOffline(j, nil)
		t.Cleanup(func() { a.Close() })
		return a, f
	}},
}

// apiCase is one call, in order, and what it must give: check says
// whether the answer is right (online: a running broker answered).
type apiCase struct {
	name  string
	call  func(ctx context.Context, a admin.API, f fixture) (any, error)
	check func(got any, f fixture, online bool) error
	// err is the error class every implementation answers with (nil:
	// none); offline answers ErrNeedsBroker instead when needsBroker.
	err         error
	needsBroker bool
}

// The three implementations of the admin API (in process, over HTTP,
// offline on a journal) answer one table alike: the same answers, the
// same error classes; offline says ErrNeedsBroker for what only a
// running broker knows.
func TestAPIImplementationsAgree(t *testing.T) {
	t.Parallel()
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			a, f := im.open(t)
			ctx := t.Context()
			for _, c := range apiCases {
				got, err := c.call(ctx, a, f)
				want := c.err
				if c.needsBroker && !im.online {
					want = admin.ErrNeedsBroker
				}
				switch {
				case want != nil && !errors.Is(err, want):
					t.Errorf("%s: %v, want %v", c.name, err, want)
				case want == nil && err != nil:
					t.Errorf("%s: %v", c.name, err)
				case want == nil && c.check != nil:
					if err := c.check(got, f, im.online); err != nil {
						t.Errorf("%s: %v", c.name, err)
					}
				}
			}
		})
	}
}

var apiCases = []apiCase{
	// Cancelling first: the cases after see the fixture without f.cancel
	// and f.batch.
	{name: "Job with a priority and a unique key", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return a.Job(ctx, f.cancel, false)
	}, check: func(got any, _ fixture, _ bool) error {
		if ji := got.(admin.JobInfo); ji.State != "pending" || ji.Priority != 7 || ji.Unique != "invoice-42" || ji.UniqueFor != 60 {
			return fmt.Errorf("%+v, want it pending with priority 7, key invoice-42 held 60 s", ji)
		}
		return nil
	}},
	{name: "Cancel a pending job", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return a.CancelJob(ctx, f.cancel)
	}, check: func(got any, f fixture, _ bool) error {
		ji := got.(admin.JobInfo)
		last := ji.Trail[len(ji.Trail)-1]
		if ji.MsgID != f.cancel || ji.State != "cancelled" || last.Kind != broker.EventCancelled || last.Reason != "cancelled by admin" {
			return fmt.Errorf("%+v, want it cancelled by admin", ji)
		}
		return nil
	}},
	{name: "The cancelled job", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		ji, err := a.Job(ctx, f.cancel, false)
		if errors.Is(err, store.ErrNotFound) {
			return "gone", nil
		}
		return ji.State, err
	}, check: func(got any, _ fixture, online bool) error {
		want := "cancelled" // the broker keeps done jobs an hour: cancelled ones too
		if !online {
			want = "gone" // offline nothing says how long to keep it
		}
		if got != want {
			return fmt.Errorf("%v, want %s", got, want)
		}
		return nil
	}},
	{name: "Jobs cancelled", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Jobs(ctx, admin.JobFilter{State: "cancelled"})
	}, check: func(got any, f fixture, online bool) error {
		p := got.(admin.JobPage)
		if online && (len(p.Jobs) != 1 || p.Jobs[0].MsgID != f.cancel || p.Jobs[0].State != "cancelled" || p.Jobs[0].Priority != 7) {
			return fmt.Errorf("%+v, want the cancelled job", p)
		}
		if !online && len(p.Jobs) != 0 {
			return fmt.Errorf("%+v, want none kept", p)
		}
		return nil
	}},
	{name: "Cancel it again", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		_, err := a.CancelJob(ctx, f.cancel)
		return err, nil
	}, check: func(got any, _ fixture, online bool) error {
		want := store.ErrWrongState
		if !online {
			want = store.ErrNotFound
		}
		if err, _ := got.(error); !errors.Is(err, want) {
			return fmt.Errorf("%v, want %v", got, want)
		}
		return nil
	}},
	{name: "Cancel a dead job", err: store.ErrWrongState, call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return a.CancelJob(ctx, f.dead)
	}},
	{name: "Cancel a done job", err: store.ErrWrongState, call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return a.CancelJob(ctx, f.done)
	}},
	{name: "Cancel an unknown job", err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.CancelJob(ctx, "nope")
	}},
	{name: "Bulk cancel, counted", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkCancel(ctx, admin.JobFilter{Header: "batch"}, false)
	}, check: func(got any, _ fixture, _ bool) error {
		if r := got.(admin.BulkResult); r.Matched != 1 || r.Done != 0 || !r.DryRun {
			return fmt.Errorf("%+v, want 1 matched, a dry run", r)
		}
		return nil
	}},
	{name: "Bulk cancel", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		r, err := a.BulkCancel(ctx, admin.JobFilter{Queue: "q", Header: "batch"}, true)
		if err != nil {
			return nil, err
		}
		p, err := a.Jobs(ctx, admin.JobFilter{State: "pending", Header: "batch"})
		return []any{r, p}, err
	}, check: func(got any, _ fixture, _ bool) error {
		r, p := got.([]any)[0].(admin.BulkResult), got.([]any)[1].(admin.JobPage)
		if r.Matched != 1 || r.Done != 1 || r.DryRun || len(p.Jobs) != 0 {
			return fmt.Errorf("%+v, then %d pending with the header: want the one cancelled", r, len(p.Jobs))
		}
		return nil
	}},
	{name: "Bulk cancel in flight, counted", needsBroker: true, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkCancel(ctx, admin.JobFilter{State: "inflight"}, false)
	}, check: func(got any, _ fixture, _ bool) error {
		if r := got.(admin.BulkResult); r.Matched != 1 {
			return fmt.Errorf("%+v, want the job w holds", r)
		}
		return nil
	}},
	{name: "Bulk cancel of every job, counted", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkCancel(ctx, admin.JobFilter{Queue: "q"}, false)
	}, check: func(got any, _ fixture, _ bool) error {
		if r := got.(admin.BulkResult); r.Matched != 2 { // pending and in flight; not the dead or done
			return fmt.Errorf("%+v, want 2", r)
		}
		return nil
	}},
	{name: "Bulk cancel of dead jobs", err: store.ErrBadFilter, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkCancel(ctx, admin.JobFilter{State: "dead"}, true)
	}},
	{name: "Job in flight with its progress", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return a.Job(ctx, f.inflight, false)
	}, check: func(got any, _ fixture, online bool) error {
		ji := got.(admin.JobInfo)
		p := ji.Progress
		switch {
		case online && (p == nil || p.Percent != 40 || p.Note != "resizing" || !strings.HasSuffix(p.Worker, "w")):
			return fmt.Errorf("progress %+v, want 40 resizing from w", p)
		case !online && p != nil:
			return fmt.Errorf("progress %+v offline, want none", p)
		case ji.Priority != emqp.DefaultPriority:
			return fmt.Errorf("priority %d, want the default", ji.Priority)
		}
		return nil
	}},
	{name: "Queues", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Queues(ctx) },
		check: func(got any, _ fixture, online bool) error {
			qs := got.([]broker.QueueInfo)
			want := broker.QueueInfo{Name: "q", Pending: 1, InFlight: 1, Dead: 1, Done: 1}
			if !online { // the journal keeps a job in flight as pending
				want.Pending, want.InFlight = 2, 0
			}
			if len(qs) != 1 || qs[0].Name != want.Name || qs[0].Pending != want.Pending || qs[0].InFlight != want.InFlight ||
				qs[0].Dead != want.Dead || qs[0].Done != want.Done {
				return fmt.Errorf("%+v, want one like %+v", qs, want)
			}
			return nil
		}},
	{name: "Workers", needsBroker: true, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Workers(ctx) },
		check: func(got any, _ fixture, _ bool) error {
			if ws := got.([]broker.WorkerInfo); len(ws) != 1 || ws[0].ID != "w" || ws[0].InFlight != 1 {
				return fmt.Errorf("%+v, want w holding one job", ws)
			}
			return nil
		}},
	{name: "Stats", needsBroker: true, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Stats(ctx) },
		check: func(got any, _ fixture, _ bool) error {
			if s := got.(admin.StatsInfo); s.Get("acked") != 6 || s.Get("dead_lettered") != 1 || s.Get("cancelled") != 2 ||
				len(s.Errors) != len(broker.ErrorCodes()) {
				return fmt.Errorf("%+v, want 6 acked, 1 dead-lettered, 2 cancelled, every error code", s)
			}
			return nil
		}},
	{name: "Overview", needsBroker: true, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Overview(ctx) },
		check: func(got any, _ fixture, _ bool) error {
			if o := got.(admin.Overview); o.Mode != "single" || !o.Ready || o.Workers != 1 || len(o.Queues) != 1 {
				return fmt.Errorf("%+v, want a ready single broker with one worker and one queue", o)
			}
			return nil
		}},
	{name: "Jobs dead", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Jobs(ctx, admin.JobFilter{State: "dead"})
	}, check: func(got any, f fixture, _ bool) error {
		if p := got.(admin.JobPage); len(p.Jobs) != 1 || p.Jobs[0].MsgID != f.dead || p.Jobs[0].LastError != "boom" || p.Jobs[0].Preview != "doomed" {
			return fmt.Errorf("%+v, want the dead job with its error", p)
		}
		return nil
	}},
	{name: "Jobs pending", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Jobs(ctx, admin.JobFilter{State: "pending", MsgIDPrefix: ""})
	}, check: func(got any, f fixture, online bool) error {
		p := got.(admin.JobPage)
		workers := map[string]string{}
		for _, j := range p.Jobs {
			workers[j.MsgID] = j.Worker
		}
		wantWorker := "w"
		if !online {
			wantWorker = ""
		}
		if len(p.Jobs) != 2 || workers[f.inflight] != wantWorker || workers[f.pending] != "" {
			return fmt.Errorf("%+v, want the pending job and the one in flight (at %q)", p, wantWorker)
		}
		return nil
	}},
	{name: "Jobs inflight", needsBroker: true, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Jobs(ctx, admin.JobFilter{State: "inflight"})
	}, check: func(got any, f fixture, _ bool) error {
		if p := got.(admin.JobPage); len(p.Jobs) != 1 || p.Jobs[0].MsgID != f.inflight || p.Jobs[0].Worker != "w" || p.Jobs[0].State != "inflight" {
			return fmt.Errorf("%+v, want the job w holds", p)
		}
		return nil
	}},
	{name: "Jobs bad filter", err: store.ErrBadFilter, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Jobs(ctx, admin.JobFilter{State: "dead", After: "nonsense"})
	}},
	{name: "Job with payload", call: func(ctx context.Context, a admin.API, f fixture) (any, error) { return a.Job(ctx, f.pending, true) },
		check: func(got any, f fixture, _ bool) error {
			ji := got.(admin.JobInfo)
			payload, _ := base64.StdEncoding.DecodeString(ji.Payload)
			if ji.MsgID != f.pending || string(payload) != "pending" || bt.TrailKinds(ji.Trail) != "received" {
				return fmt.Errorf("%+v, want the pending job, its payload, its trail", ji)
			}
			return nil
		}},
	{name: "Job done with result", call: func(ctx context.Context, a admin.API, f fixture) (any, error) { return a.Job(ctx, f.done, true) },
		check: func(got any, f fixture, _ bool) error {
			ji := got.(admin.JobInfo)
			if ji.State != "done" || ji.Result == nil {
				return fmt.Errorf("%+v, want it done with its result", ji)
			}
			if res, _ := base64.StdEncoding.DecodeString(*ji.Result); string(res) != "the result" {
				return fmt.Errorf("result %q", res)
			}
			return nil
		}},
	{name: "Job unknown", err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Job(ctx, "nope", false) }},
	{name: "Payload", call: func(ctx context.Context, a admin.API, f fixture) (any, error) { return a.Payload(ctx, f.inflight) },
		check: func(got any, _ fixture, _ bool) error {
			if string(got.([]byte)) != "running" {
				return fmt.Errorf("%q", got)
			}
			return nil
		}},
	{name: "Result", call: func(ctx context.Context, a admin.API, f fixture) (any, error) { return a.Result(ctx, f.done) },
		check: func(got any, _ fixture, _ bool) error {
			if string(got.([]byte)) != "the result" {
				return fmt.Errorf("%q", got)
			}
			return nil
		}},
	{name: "Result of a pending job", err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, f fixture) (any, error) { return a.Result(ctx, f.pending) }},
	{name: "Retry a pending job", err: store.ErrWrongState, call: func(ctx context.Context, a admin.API, f fixture) (any, error) { return nil, a.RetryJob(ctx, f.pending) }},
	{name: "Bulk dead, counted", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkDead(ctx, admin.JobFilter{State: "dead"}, false, false)
	}, check: func(got any, _ fixture, _ bool) error {
		if r := got.(admin.BulkResult); r.Matched != 1 || r.Done != 0 || !r.DryRun {
			return fmt.Errorf("%+v, want 1 matched, a dry run", r)
		}
		return nil
	}},
	{name: "Bulk remove without a state", err: store.ErrBadFilter, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkRemove(ctx, admin.JobFilter{}, true)
	}},
	{name: "Pause a queue", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		paused := true
		return a.ChangeQueue(ctx, "q", broker.QueueChange{Paused: &paused})
	}, check: func(got any, _ fixture, _ bool) error {
		if q := got.(broker.QueueInfo); q.Name != "q" || !q.Paused {
			return fmt.Errorf("%+v, want q paused", q)
		}
		return nil
	}},
	{name: "Bad queue settings", err: store.ErrInvalidJob, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		n := -1
		return a.ChangeQueue(ctx, "q", broker.QueueChange{Concurrency: &n})
	}},
	{name: "Tenant defaults of a queue", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		n := 4
		return a.ChangeQueue(ctx, "q", broker.QueueChange{TenantConcurrency: &n})
	}, check: func(got any, _ fixture, _ bool) error {
		if q := got.(broker.QueueInfo); q.TenantConcurrency != 4 || !q.Paused {
			return fmt.Errorf("%+v, want tenant concurrency 4, still paused", q)
		}
		return nil
	}},
	{name: "A tenant's own settings", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		n, w := 2, 3
		return a.ChangeTenant(ctx, "q", "acme", broker.TenantChange{Concurrency: &n, Weight: &w})
	}, check: func(got any, _ fixture, _ bool) error {
		if ts := got.(store.TenantSettings); ts.Concurrency == nil || *ts.Concurrency != 2 || ts.Weight != 3 || ts.Rate != nil {
			return fmt.Errorf("%+v, want concurrency 2, weight 3", ts)
		}
		return nil
	}},
	{name: "The jobs without a tenant", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		r := 1.5
		return a.ChangeTenant(ctx, "q", "", broker.TenantChange{Rate: &r})
	}, check: func(got any, _ fixture, _ bool) error {
		if ts := got.(store.TenantSettings); ts.Rate == nil || *ts.Rate != 1.5 {
			return fmt.Errorf("%+v, want rate 1.5", ts)
		}
		return nil
	}},
	{name: "Bad tenant settings", err: store.ErrInvalidJob, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		w := store.MaxWeight + 1
		return a.ChangeTenant(ctx, "q", "acme", broker.TenantChange{Weight: &w})
	}},
	{name: "A default not known", err: store.ErrInvalidJob, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.ChangeTenant(ctx, "q", "acme", broker.TenantChange{Default: []string{"colour"}})
	}},
	{name: "Tenants", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Tenants(ctx, "q", 0, 10)
	}, check: func(got any, _ fixture, online bool) error {
		p := got.(broker.TenantPage)
		byName := map[string]broker.TenantInfo{}
		for _, t := range p.Tenants {
			byName[t.Name] = t
		}
		acme, none := byName["acme"], byName[""]
		if p.Total != 2 || acme.Concurrency != 2 || acme.Weight != 3 || none.Concurrency != 4 || none.Rate != 1.5 || none.Weight != 1 {
			return fmt.Errorf("%+v, want acme (concurrency 2, weight 3) and \"\" (the default concurrency 4, rate 1.5)", p)
		}
		if online && (p.Tenants[0].Name != "" || none.Pending == 0) {
			return fmt.Errorf("%+v, want the jobs without a tenant first, by backlog", p)
		}
		return nil
	}},
	{name: "A page of tenants", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Tenants(ctx, "q", 1, 1)
	}, check: func(got any, _ fixture, _ bool) error {
		if p := got.(broker.TenantPage); p.Total != 2 || len(p.Tenants) != 1 || p.Next != 0 {
			return fmt.Errorf("%+v, want the second of 2, no next page", p)
		}
		return nil
	}},
	{name: "Set a limiter", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		if err := a.SetLimiter(ctx, "partner-api", store.LimiterSettings{Concurrency: 5, Rate: 25, Burst: 10}); err != nil {
			return nil, err
		}
		return a.Limiters(ctx)
	}, check: func(got any, _ fixture, _ bool) error {
		ls := got.([]broker.LimiterInfo)
		if len(ls) != 1 || ls[0].Name != "partner-api" || ls[0].LimiterSettings != (store.LimiterSettings{Concurrency: 5, Rate: 25, Burst: 10}) {
			return fmt.Errorf("%+v, want partner-api", ls)
		}
		return nil
	}},
	{name: "A limiter that limits nothing", err: store.ErrInvalidJob, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return nil, a.SetLimiter(ctx, "idle", store.LimiterSettings{Burst: 3})
	}},
	{name: "Remove the limiter", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		if err := a.RemoveLimiter(ctx, "partner-api"); err != nil {
			return nil, err
		}
		return a.Limiters(ctx)
	}, check: func(got any, _ fixture, _ bool) error {
		if ls := got.([]broker.LimiterInfo); len(ls) != 0 {
			return fmt.Errorf("%+v, want none", ls)
		}
		return nil
	}},
	{name: "Remove it again", err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return nil, a.RemoveLimiter(ctx, "partner-api")
	}},
	{name: "Why a job of a paused queue waits", needsBroker: true, call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return a.Why(ctx, f.pending)
	}, check: func(got any, f fixture, _ bool) error {
		if w := got.(broker.Why); w.MsgID != f.pending || w.Reason != broker.WhyQueuePaused || !strings.Contains(w.Sentence, "paused") {
			return fmt.Errorf("%+v, want queue_paused", w)
		}
		return nil
	}},
	{name: "Why of an unknown job", needsBroker: true, err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Why(ctx, "nope")
	}},
	{name: "Add a schedule", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.AddSchedule(ctx, admin.ScheduleSpec{Queue: "q", Every: "1h", Headers: "nohaste,schedule-id:hourly", Payload: "tick"})
	}, check: func(got any, _ fixture, _ bool) error {
		if s := got.(admin.ScheduleInfo); s.ID != "hourly" || s.Every != "1h0m0s" || s.Left != -1 || s.Preview != "tick" {
			return fmt.Errorf("%+v, want hourly every hour", s)
		}
		return nil
	}},
	{name: "A bad schedule", err: store.ErrInvalidJob, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.AddSchedule(ctx, admin.ScheduleSpec{Queue: "q", Every: "1.5s"})
	}},
	{name: "Schedules", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Schedules(ctx, "", 10) },
		check: func(got any, _ fixture, _ bool) error {
			if p := got.(admin.SchedulePage); len(p.Schedules) != 1 || p.Schedules[0].ID != "hourly" {
				return fmt.Errorf("%+v, want the one schedule", p)
			}
			return nil
		}},
	{name: "Pause the schedule", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		if err := a.PauseSchedule(ctx, "hourly", true); err != nil {
			return nil, err
		}
		return a.Schedule(ctx, "hourly", true)
	}, check: func(got any, _ fixture, _ bool) error {
		if s := got.(admin.ScheduleInfo); !s.Paused || s.Payload != base64.StdEncoding.EncodeToString([]byte("tick")) {
			return fmt.Errorf("%+v, want it paused, with its payload", s)
		}
		return nil
	}},
	{name: "Remove the schedule", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return nil, a.RemoveSchedule(ctx, "hourly")
	}},
	{name: "The removed schedule", err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Schedule(ctx, "hourly", false)
	}},
	{name: "Retry the dead job", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		if err := a.RetryJob(ctx, f.dead); err != nil {
			return nil, err
		}
		return a.Jobs(ctx, admin.JobFilter{State: "dead"})
	}, check: func(got any, _ fixture, _ bool) error {
		if p := got.(admin.JobPage); len(p.Jobs) != 0 {
			return fmt.Errorf("%+v still dead", p)
		}
		return nil
	}},
	{name: "Remove a job", call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return nil, a.RemoveJob(ctx, f.pending)
	}},
	{name: "Remove it again", err: store.ErrNotFound, call: func(ctx context.Context, a admin.API, f fixture) (any, error) {
		return nil, a.RemoveJob(ctx, f.pending)
	}},
	{name: "Bulk remove the done", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.BulkRemove(ctx, admin.JobFilter{State: "done"}, true)
	}, check: func(got any, _ fixture, _ bool) error {
		if r := got.(admin.BulkResult); r.Matched != 1 || r.Done != 1 {
			return fmt.Errorf("%+v, want the done job removed", r)
		}
		return nil
	}},
	{name: "Purge", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.PurgeQueue(ctx, "q") },
		check: func(got any, _ fixture, _ bool) error {
			if n := got.(int); n != 2 { // the one in flight, and the one retried
				return fmt.Errorf("%d purged, want 2", n)
			}
			return nil
		}},
	{name: "Compact", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.Compact(ctx) },
		check: func(got any, _ fixture, _ bool) error {
			if st := got.(store.CompactStats); st.Before == 0 || st.After == 0 {
				return fmt.Errorf("%+v, want both sizes", st)
			}
			return nil
		}},
	// The fixture's journal has no keys: nothing to seal under.
	{name: "Rekey without keys", err: store.ErrNoKeys, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		return a.Rekey(ctx, 0)
	}},
	{name: "Rekey status", call: func(ctx context.Context, a admin.API, _ fixture) (any, error) { return a.RekeyStatus(ctx) },
		check: func(got any, _ fixture, _ bool) error {
			if st := got.(store.RekeyStatus); st.Key != "" || st.Running || st.String() != "no rekey" {
				return fmt.Errorf("%+v, want no rekey", st)
			}
			return nil
		}},
	{name: "Events", needsBroker: true, call: func(ctx context.Context, a admin.API, _ fixture) (any, error) {
		events, err := a.Events(ctx, "q", "")
		if err != nil {
			return nil, err
		}
		defer events.Close()
		resumed := false
		if _, err := a.ChangeQueue(ctx, "q", broker.QueueChange{Paused: &resumed}); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, bt.Wait)
		defer cancel()
		return events.Next(ctx)
	}, check: func(got any, _ fixture, _ bool) error {
		if es := got.([]broker.Event); len(es) == 0 || es[0].Kind != broker.EventQueueControls || es[0].Controls == nil || es[0].Controls.Paused {
			return fmt.Errorf("%+v, want q's controls resumed", es)
		}
		return nil
	}},
}
