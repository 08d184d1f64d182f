package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// emq tenants and emq limiters set, list and remove a running broker's
// settings, and, with the broker stopped, its journal's; the broker
// started again on the journal has them all.
func TestTenantsAndLimitersCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fastBroker, nil)
	on := []string{"--admin", b.AdminAddr()}
	run := func(args ...string) string { t.Helper(); return mustEmq(t, append(args, on...)...) }
	if out := run("tenants", "set", "mail", "acme", "--concurrency", "2", "--weight", "3"); !strings.Contains(out, "acme  concurrency 2, weight 3") {
		t.Fatalf("tenants set: %q", out)
	}
	if out := run("tenants", "set", "mail", "", "--rate", "1.5"); !strings.Contains(out, "(no tenant)  rate 1.5") {
		t.Fatalf("tenants set '': %q", out)
	}
	if out := run("tenants", "set", "mail", "--no-tenant", "--burst", "4"); !strings.Contains(out, "(no tenant)  rate 1.5, burst 4") {
		t.Fatalf("tenants set --no-tenant: %q", out)
	}
	if out := run("tenants", "set", "mail", "acme", "--default", "weight"); !strings.Contains(out, "acme  concurrency 2\n") {
		t.Fatalf("tenants set --default weight: %q", out)
	}
	for args, want := range map[string]string{
		"tenants set mail acme":                  "say what to set",
		"tenants set mail":                       "name the queue and the tenant",
		"tenants set mail acme --no-tenant":      "with --no-tenant name only the queue",
		"tenants set mail acme --weight 5000":    "weight",
		"tenants set mail acme --default colour": `"colour" is not a tenant setting`,
		"tenants set mail acme --rate NaN":       "rate",
		"tenants ls mail --limit 0":              "limit",
		"limiters set idle --burst 3":            "must limit something",
		"limiters set api --rate fast":           `rate: "fast" is not a number`,
		"limiters rm nothing":                    `no limiter "nothing"`,
		"jobs why no-such-job":                   "no-such-job",
	} {
		_, stderr, err := emq(t, "", append(strings.Fields(args), on...)...)
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("emq %s: %v %q, want an error naming %q", args, err, stderr, want)
		}
	}

	c := bt.Dial(t, b.Frontend(), "c")
	for _, tenant := range []string{"acme", "acme", "acme", "beta"} {
		c.Request("mail", "tenant:"+tenant, nil)
	}
	var page broker.TenantPage
	if err := json.Unmarshal([]byte(run("tenants", "ls", "mail", "--json")), &page); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range page.Tenants {
		names = append(names, ti.Name)
	}
	if !reflect.DeepEqual(names, []string{"acme", "beta", ""}) || page.Tenants[0].Pending != 3 || page.Tenants[0].Concurrency != 2 ||
		page.Tenants[2].Rate != 1.5 || page.Tenants[2].Burst != 4 {
		t.Fatalf("tenants ls: %+v, want acme (3 pending, concurrency 2), beta, then the jobs without a tenant", page)
	}
	if out := run("tenants", "ls", "mail", "--offset", "1", "--limit", "1"); !strings.Contains(out, "beta") || strings.Contains(out, "acme") ||
		!strings.Contains(out, "1 of 3 tenants; the next page: --offset 2") {
		t.Fatalf("tenants ls, a page:\n%s", out)
	}

	if out := run("limiters", "set", "api", "--concurrency", "5", "--rate", "25", "--burst", "10"); out != "limiter api: concurrency 5, rate 25, burst 10\n" {
		t.Fatalf("limiters set: %q", out)
	}
	run("limiters", "set", "gone", "--rate", "1")
	if out := run("limiters", "rm", "gone"); out != "removed limiter gone\n" {
		t.Fatalf("limiters rm: %q", out)
	}
	if out := run("limiters", "ls"); !strings.Contains(out, "api ") || strings.Contains(out, "gone") {
		t.Fatalf("limiters ls:\n%s", out)
	}

	// Offline, on the stopped broker's journal.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	off := []string{"--data-dir", b.Dir}
	mustEmq(t, append([]string{"tenants", "set", "mail", "acme", "--rate", "2"}, off...)...)
	mustEmq(t, append([]string{"limiters", "set", "night", "--concurrency", "1"}, off...)...)
	page = broker.TenantPage{} // not merged into the online page
	if err := json.Unmarshal([]byte(mustEmq(t, append([]string{"tenants", "ls", "mail", "--json"}, off...)...)), &page); err != nil {
		t.Fatal(err)
	}
	if page.Total != 2 || page.Tenants[1].Name != "acme" || page.Tenants[1].Concurrency != 2 || page.Tenants[1].Rate != 2 {
		t.Fatalf("offline tenants ls: %+v, want \"\" and acme (concurrency 2, rate 2)", page)
	}
	var ls []broker.LimiterInfo
	if err := json.Unmarshal([]byte(mustEmq(t, append([]string{"limiters", "--json"}, off...)...)), &ls); err != nil {
		t.Fatal(err)
	}
	wantLimiters := []broker.LimiterInfo{{Name: "api", LimiterSettings: store.LimiterSettings{Concurrency: 5, Rate: 25, Burst: 10}},
		{Name: "night", LimiterSettings: store.LimiterSettings{Concurrency: 1}}}
	if !reflect.DeepEqual(ls, wantLimiters) {
		t.Fatalf("offline limiters: %+v, want %+v", ls, wantLimiters)
	}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "why", "x"}, off...)...); err == nil || !strings.Contains(stderr, "running broker") {
		t.Errorf("jobs why offline: %v %q, want it to need a running broker", err, stderr)
	}

	// The broker started again on the journal has them all.
	b = bt.Start(t, b.Dir, fastBroker)
	page, err := b.Tenants(t.Context(), "mail", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.TenantSettings{}
	for _, ti := range page.Tenants {
		got[ti.Name] = ti.Own
	}
	if a, none := got["acme"], got[""]; a.Concurrency == nil || *a.Concurrency != 2 || a.Rate == nil || *a.Rate != 2 ||
		none.Rate == nil || *none.Rate != 1.5 || none.Burst == nil || *none.Burst != 4 {
		t.Fatalf("after the restart: %+v", page)
	}
	if ls, err := b.Limiters(t.Context()); err != nil || !reflect.DeepEqual(ls, wantLimiters) {
		t.Fatalf("limiters after the restart: %+v %v, want %+v", ls, err, wantLimiters)
	}
}

// emq jobs why says why a job waits: a sentence, then its parts.
func TestJobsWhyCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fastBroker, nil)
	on := []string{"--admin", b.AdminAddr()}
	mustEmq(t, append([]string{"queues", "pause", "held"}, on...)...)
	c := bt.Dial(t, b.Frontend(), "c")
	paused := c.Request("held", "tenant:acme", nil)
	later := c.Request("q", "delay:600", nil)

	out := mustEmq(t, append([]string{"jobs", "why", paused}, on...)...)
	lines := strings.Split(out, "\n")
	if lines[0] != `Queue "held" is paused (emq queues resume held).` || !strings.Contains(out, "reason  queue_paused") ||
		!strings.Contains(out, "tenant  acme") {
		t.Fatalf("why of a job behind a paused queue:\n%s", out)
	}
	var w broker.Why
	if err := json.Unmarshal([]byte(mustEmq(t, append([]string{"jobs", "why", later, "--json"}, on...)...)), &w); err != nil {
		t.Fatal(err)
	}
	if w.Reason != broker.WhyDelayed || w.Until.IsZero() || !strings.Contains(w.Sentence, "delayed until") {
		t.Fatalf("why of a delayed job: %+v", w)
	}
	_, stderr, err := emq(t, "", append([]string{"jobs", "why", "no-such-job"}, on...)...)
	if err == nil || !strings.Contains(stderr, `"no-such-job"`) {
		t.Fatalf("why of an unknown job: %v %q, want an error naming it", err, stderr)
	}
}
