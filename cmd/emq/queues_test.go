package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// emq queues pause, resume and set change a running broker's controls,
// and, with the broker stopped, its journal's; emq queues shows them.
func TestQueueControlsCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		fastBroker(o)
	}, nil)
	on := []string{"--admin", b.AdminAddr()}
	if out := mustEmq(t, append([]string{"queues", "pause", "mail"}, on...)...); out != "paused mail\n" {
		t.Fatalf("pause: %q", out)
	}
	if out := mustEmq(t, append([]string{"queues", "set", "mail", "--concurrency", "3", "--rate", "1.5"}, on...)...); !strings.Contains(out, "paused, concurrency 3, rate 1.5/s burst 1") {
		t.Fatalf("set: %q", out)
	}
	if out := mustEmq(t, append([]string{"queues", "set", "mail", "--tenant-concurrency", "2", "--tenant-rate", "0.5"}, on...)...); !strings.Contains(out, "each tenant concurrency 2, each tenant rate 0.5/s burst 1") {
		t.Fatalf("set tenant defaults: %q", out)
	}
	if out := mustEmq(t, append([]string{"queues"}, on...)...); !strings.Contains(out, "CONTROLS") || !strings.Contains(out, "paused, concurrency 3") {
		t.Fatalf("queues:\n%s", out)
	}
	for args, want := range map[string]string{
		"set mail":                   "--concurrency, --rate, --burst, --tenant-concurrency",
		"set mail --tenant-rate x":   `tenant-rate: "x" is not a number`,
		"set mail --tenant-burst -1": "tenant-burst must be 0",
		"set mail --rate fast":       `rate: "fast" is not a number`,
		"set mail --concurrency x":   "concurrency",
		"set mail --burst -2":        "burst must be 0",
		"set mail --rate NaN":        "rate must be 0",
		"pause":                      "accepts 1 arg",
	} {
		_, stderr, err := emq(t, "", append(append([]string{"queues"}, strings.Fields(args)...), on...)...)
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("emq queues %s: %v %q, want an error naming %q", args, err, stderr, want)
		}
	}
	mustEmq(t, append([]string{"queues", "resume", "mail"}, on...)...)

	// Offline: the journal of the stopped broker.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	off := []string{"--data-dir", b.Dir}
	mustEmq(t, append([]string{"queues", "set", "mail", "--burst", "5", "--tenant-burst", "3"}, off...)...)
	mustEmq(t, append([]string{"queues", "pause", "other"}, off...)...)
	var qs []broker.QueueInfo
	if err := json.Unmarshal([]byte(mustEmq(t, append([]string{"queues", "--json"}, off...)...)), &qs); err != nil {
		t.Fatal(err)
	}
	want := []broker.QueueInfo{{Name: "mail", Concurrency: 3, Rate: 1.5, Burst: 5, TenantConcurrency: 2, TenantRate: 0.5, TenantBurst: 3},
		{Name: "other", Paused: true}}
	if !reflect.DeepEqual(qs, want) {
		t.Fatalf("offline queues: %+v, want %+v", qs, want)
	}
	b = bt.Start(t, b.Dir, fastBroker)
	got, _ := b.Queues(t.Context())
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the broker started on the journal: %+v, want %+v", got, want)
	}
}

// The config file's queues section gives defaults; a bad one names its key.
func TestConfigQueueDefaults(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	good := write("good.yaml", "queues:\n  mail:\n    paused: true\n    concurrency: 4\n    tenant-concurrency: 2\n  reports:\n    rate: 2.5\n    burst: 3\n    tenant-rate: 0.5\n    tenant-burst: 4\n")
	c, err := loadConfig(newBrokerCmd().Flags(), "")
	if err != nil {
		t.Fatal(err)
	}
	if o, err := brokerOptions(c); err != nil || o.Queues != nil {
		t.Fatalf("no config file: %v %v", o.Queues, err)
	}
	cmd := newBrokerCmd()
	cmd.Flags().Parse([]string{"--config", good})
	if c, err = loadConfig(cmd.Flags(), good); err != nil {
		t.Fatal(err)
	}
	o, err := brokerOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]store.QueueSettings{"mail": {Paused: true, Concurrency: 4, TenantConcurrency: 2},
		"reports": {Rate: 2.5, Burst: 3, TenantRate: 0.5, TenantBurst: 4}}
	if !reflect.DeepEqual(o.Queues, want) {
		t.Fatalf("queues: %+v, want %+v", o.Queues, want)
	}
	for text, wantErr := range map[string]string{
		"queues:\n  mail:\n    concurency: 4\n":    "queues.mail.concurency: unknown key",
		"queues:\n  mail:\n    concurrency: 1.5\n": `queues.mail.concurrency: "1.5" is not a whole number`,
		"queues:\n  mail:\n    rate: fast\n":       `queues.mail.rate: "fast" is not a number`,
		"queues:\n  mail:\n    paused: maybe\n":    `queues.mail.paused: "maybe" is not true or false`,
		"queues:\n  mail:\n    rate: -1\n":         "queues.mail: invalid queue settings: rate",
		"queues:\n  mail:\n    tenant-rate: x\n":   `queues.mail.tenant-rate: "x" is not a number`,
		"queues:\n  mail: 3\n":                     "queues.mail: want paused, concurrency, rate or burst",
	} {
		f := write("bad.yaml", text)
		_, err := brokerConfig(t, "--config", f)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: %v, want an error with %q", text, err, wantErr)
		}
	}
}

// emq tail prints a running broker's events as they happen, filtered;
// --json prints them as the API sends them.
func TestTail(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		fastBroker(o)
	}, nil)
	type result struct {
		out, stderr string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		out, stderr, err := emq(t, "", "tail", "--queue", "q", "--count", "3", "--admin", b.AdminAddr())
		done <- result{out, stderr, err}
	}()
	bt.Eventually(t, "tail listening", func() bool {
		body := httpGet(t, "http://"+b.AdminAddr()+"/metrics")
		return strings.Contains(body, "emq_event_listeners 1")
	})
	client := bt.Dial(t, b.Frontend(), "c")
	client.Request("other", "", nil)
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	id := client.Request("q", "", nil)
	bt.Expect[*emqp.Request](worker)
	worker.Reply(id, nil)
	r := <-done
	if r.err != nil {
		t.Fatalf("emq tail: %v %s", r.err, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 3 {
		t.Fatalf("emq tail --count 3 printed:\n%s", r.out)
	}
	for i, kind := range []string{"acked", "dispatched", "replied"} {
		if f := strings.Fields(lines[i]); len(f) < 4 || f[1] != kind || f[2] != `queue="q"` || f[3] != `msgid="`+id+`"` {
			t.Errorf("line %d: %q, want %s of %s", i, lines[i], kind, id)
		}
	}
	if _, stderr, err := emq(t, "", "tail", "--data-dir", b.Dir); err == nil || !strings.Contains(stderr, "--admin") {
		t.Errorf("tail offline: %v %q", err, stderr)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// Searching on the server: emq jobs ls and emq dlq take filters; a bulk
// retry or rm counts what matches and acts only with --yes, online and
// offline.
func TestSearchAndBulkCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		fastBroker(o)
	}, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	var smtp, timeout []string
	for i := range 12 {
		h := "retry-count:0"
		if i%2 == 0 {
			h += ",tenant:acme"
		}
		id := client.Request("q", h, nil)
		worker.Ready(1)
		bt.Expect[*emqp.Request](worker)
		reason := "smtp: 550 mailbox unavailable"
		if i%3 == 0 {
			reason, timeout = "dns lookup failed", append(timeout, id)
		} else {
			smtp = append(smtp, id)
		}
		worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: id, Reason: reason})
	}
	bt.Eventually(t, "all dead", func() bool { return b.Stats().DeadLettered == 12 })
	on := []string{"--admin", b.AdminAddr()}
	list := func(args ...string) admin.JobPage {
		t.Helper()
		var p admin.JobPage
		if err := json.Unmarshal([]byte(mustEmq(t, append(append([]string{"jobs", "ls", "--json"}, args...), on...)...)), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := list("--state", "dead", "--error", "550"); len(p.Jobs) != len(smtp) {
		t.Fatalf("--error 550: %d jobs, want %d", len(p.Jobs), len(smtp))
	}
	if p := list("--header", "tenant:acme", "--error", "dns"); len(p.Jobs) != 2 { // i = 0, 6
		t.Fatalf("--header tenant:acme --error dns: %+v", p.Jobs)
	}
	if p := list("--newer-than", "1h", "--msgid-prefix", smtp[0]); len(p.Jobs) != 1 || p.Jobs[0].MsgID != smtp[0] {
		t.Fatalf("--msgid-prefix: %+v", p.Jobs)
	}
	if p := list("--older-than", "1h"); len(p.Jobs) != 0 {
		t.Fatalf("--older-than 1h: %+v", p.Jobs)
	}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "ls", "--older-than", "soon"}, on...)...); err == nil || !strings.Contains(stderr, "older_than") {
		t.Errorf("a bad age: %v %q", err, stderr)
	}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "ls", "--state", "bogus"}, on...)...); err == nil || !strings.Contains(stderr, `state "bogus"`) {
		t.Errorf("a bad state: %v %q", err, stderr)
	}

	dlq := func(args ...string) string {
		t.Helper()
		return mustEmq(t, append(append([]string{"dlq"}, args...), on...)...)
	}
	if out := dlq("retry", "--error", "550"); out != fmt.Sprintf("%d dead jobs match; add --yes to retry them\n", len(smtp)) {
		t.Fatalf("count only: %q", out)
	}
	if n := b.Stats().Acked; n != 12 {
		t.Fatalf("a count changed something: %d", n)
	}
	worker.Ready(20)
	if out := dlq("retry", "--error", "550", "--yes"); out != fmt.Sprintf("retried %d of %d matching dead jobs\n", len(smtp), len(smtp)) {
		t.Fatalf("retry --yes: %q", out)
	}
	for range smtp { // back in their queue: dispatched again
		bt.Expect[*emqp.Request](worker)
	}
	if p := list("--state", "dead"); len(p.Jobs) != len(timeout) {
		t.Fatalf("dead after the retry: %d, want %d", len(p.Jobs), len(timeout))
	}
	if _, stderr, err := emq(t, "", append([]string{"dlq", "rm", "--error", "dns", "--yes", timeout[0]}, on...)...); err == nil || !strings.Contains(stderr, "one MSGID, or --all, or filters") {
		t.Fatalf("an id and filters together: %v %q", err, stderr)
	}
	if err := b.Stop(); err != nil { // offline
		t.Fatal(err)
	}
	off := []string{"--data-dir", b.Dir}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "ls", "--state", "bogus"}, off...)...); err == nil || !strings.Contains(stderr, `state "bogus"`) {
		t.Errorf("a bad state offline (it listed everything before): %v %q", err, stderr)
	}
	if out := mustEmq(t, append([]string{"dlq", "rm", "--error", "dns", "--yes"}, off...)...); out != fmt.Sprintf("removed %d of %d matching dead jobs\n", len(timeout), len(timeout)) {
		t.Fatalf("offline rm: %q", out)
	}
	if out := mustEmq(t, append([]string{"dlq", "ls"}, off...)...); strings.Count(out, "\n") != 1 {
		t.Fatalf("dead letters left:\n%s", out)
	}
}

// The admin commands reach an HTTPS admin listener with --admin
// https://... and --admin-ca; the read-only token reads and is refused
// changes with a clear error.
func TestAdminCLIOverTLSWithReadToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := bt.SelfSigned(t, dir)
	b := bt.StartAdmin(t, "", fastBroker, func(o *admin.Options) {
		o.Token, o.ReadToken = "full", "look"
		o.TLSCert, o.TLSKey = cert, key
	})
	tlsArgs := []string{"--admin", "https://" + b.AdminAddr(), "--admin-ca", cert}
	if out := mustEmq(t, append([]string{"queues", "--admin-token", "look"}, tlsArgs...)...); !strings.Contains(out, "QUEUE") {
		t.Fatalf("queues with the read-only token: %q", out)
	}
	if _, stderr, err := emq(t, "", append([]string{"queues", "pause", "q", "--admin-token", "look"}, tlsArgs...)...); err == nil || !strings.Contains(stderr, "read-only admin token may not change anything") {
		t.Fatalf("pause with the read-only token: %v %q", err, stderr)
	}
	mustEmq(t, append([]string{"queues", "pause", "q", "--admin-token", "full"}, tlsArgs...)...)
	if _, stderr, err := emq(t, "", "queues", "--admin", "https://"+b.AdminAddr(), "--admin-token", "full"); err == nil || !strings.Contains(stderr, "pass its CA with --admin-ca") {
		t.Fatalf("without --admin-ca: %v %q", err, stderr)
	}
	if _, stderr, err := emq(t, "", "queues", "--admin", b.AdminAddr(), "--admin-ca", cert); err == nil || !strings.Contains(stderr, "only for an https://") {
		t.Fatalf("--admin-ca with plain http: %v %q", err, stderr)
	}
	if _, stderr, err := emq(t, "", "queues", "--admin", "https://"+b.AdminAddr(), "--admin-ca", filepath.Join(dir, "none.pem")); err == nil || !strings.Contains(stderr, "admin-ca") {
		t.Fatalf("a missing --admin-ca: %v %q", err, stderr)
	}
}
