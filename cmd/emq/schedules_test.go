package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// emq schedule(s) add|ls|show|pause|resume|rm, online against a running
// broker and offline on its journal; what one side stores the other sees.
func TestSchedulesCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fastBroker(o) }, nil)
	on := []string{"--admin", b.AdminAddr()}
	add := []string{"schedule", "add", "--queue", "reports", "--every", "1h", "--id", "hourly", "--nohaste", "--run-count", "3"}
	out := mustEmq(t, append(append(add, on...), "hello")...)
	if !strings.Contains(out, "schedule hourly: queue reports, every 1h0m0s") {
		t.Fatalf("add: %s", out)
	}
	var first, again admin.ScheduleInfo
	json.Unmarshal([]byte(mustEmq(t, append(append(add, on...), "--json", "hello")...)), &first)
	json.Unmarshal([]byte(mustEmq(t, append(append(add, on...), "--json", "hello")...)), &again)
	if again.ID != "hourly" || !again.Created.Equal(first.Created) {
		t.Fatalf("the same schedule added again: %+v, want it left as it was (%+v)", again, first)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--queue", "q", "--cron", "61 * * * *", "x"}, `cron expression "61 * * * *"`},
		{[]string{"--queue", "q", "--every", "30s", "--cron", "@hourly"}, "every or cron, not both"},
		{[]string{"--queue", "q", "--cron", "@daily", "--tz", "Mars/Olympus"}, "tz:Mars/Olympus"},
		{[]string{"--every", "30s"}, "queue name"},
	} {
		_, stderr, err := emq(t, "", append(append([]string{"schedule", "add"}, c.args...), on...)...)
		if err == nil || !strings.Contains(stderr, "invalid schedule") || !strings.Contains(stderr, c.says) {
			t.Errorf("add %v: %v %s, want an error naming %q", c.args, err, stderr, c.says)
		}
	}
	var p admin.SchedulePage
	json.Unmarshal([]byte(mustEmq(t, append([]string{"schedules", "ls", "--json"}, on...)...)), &p)
	if ss := p.Schedules; len(ss) != 1 || ss[0].ID != "hourly" || ss[0].Left != 3 || ss[0].Headers != "schedule-id:hourly,nohaste,run_count:3" {
		t.Fatalf("ls: %+v", ss)
	}
	mustEmq(t, append([]string{"schedules", "pause", "hourly"}, on...)...)
	if out := mustEmq(t, append([]string{"schedules", "ls"}, on...)...); !strings.Contains(out, "paused") {
		t.Fatalf("ls after pause:\n%s", out)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}

	off := []string{"--data-dir", b.Dir}
	out = mustEmq(t, append([]string{"schedules", "show", "hourly", "--payload"}, off...)...)
	for _, want := range []string{"queue         reports", "state         paused", "left          3", `payload       "hello"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("offline show lacks %q:\n%s", want, out)
		}
	}
	mustEmq(t, append([]string{"schedules", "resume", "hourly"}, off...)...)
	mustEmq(t, append([]string{"schedule", "add", "--queue", "q", "--cron", "@daily", "--id", "daily", "x"}, off...)...)
	mustEmq(t, append([]string{"schedule", "add", "--queue", "q", "--cron", "@weekly", "--id", "weekly", "x"}, off...)...)
	mustEmq(t, append([]string{"schedules", "rm", "hourly"}, off...)...)
	if _, stderr, err := emq(t, "", append([]string{"schedules", "rm", "hourly"}, off...)...); err == nil || !strings.Contains(stderr, "no such schedule: hourly") {
		t.Fatalf("rm twice: %v %s", err, stderr)
	}

	b2 := bt.StartAdmin(t, b.Dir, func(o *broker.Options) { fastBroker(o) }, nil)
	on = []string{"--admin", b2.AdminAddr()}
	p = admin.SchedulePage{}
	json.Unmarshal([]byte(mustEmq(t, append([]string{"schedules", "ls", "--json"}, on...)...)), &p)
	if ss := p.Schedules; len(ss) != 2 || ss[0].ID != "daily" || ss[0].Cron != "@daily" || ss[0].Paused || ss[1].ID != "weekly" {
		t.Fatalf("what the broker keeps after the offline changes: %+v", ss)
	}
	if out := mustEmq(t, append([]string{"schedules", "ls", "--limit", "1"}, on...)...); !strings.Contains(out, "(more: --after daily)") {
		t.Fatalf("ls --limit 1:\n%s", out)
	}
	if _, stderr, err := emq(t, "", append([]string{"schedules", "show", "hourly"}, on...)...); err == nil || !strings.Contains(stderr, "no such schedule: hourly") {
		t.Fatalf("online show of a removed schedule: %v %s", err, stderr)
	}
}
