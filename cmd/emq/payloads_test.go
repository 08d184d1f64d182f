package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// --admin-show-payloads is left unset (nil: it depends on the tokens),
// or true or false from the flag, the environment or the file.
func TestAdminShowPayloadsOption(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{nil, "", "unset"},
		{[]string{"--admin-show-payloads"}, "", "true"},
		{[]string{"--admin-show-payloads=false"}, "", "false"},
		{nil, "false", "false"},
	} {
		t.Setenv("EMQ_ADMIN_SHOW_PAYLOADS", c.env) // put back at the end
		if c.env == "" {
			os.Unsetenv("EMQ_ADMIN_SHOW_PAYLOADS")
		}
		flags := newBrokerCmd().Flags()
		if err := flags.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(flags, "")
		if err != nil {
			t.Fatal(err)
		}
		opts, err := brokerOptions(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := adminOptions(cfg, opts)
		if err != nil {
			t.Fatalf("%v %s: %v", c.args, c.env, err)
		}
		got := "unset"
		if a.ShowPayloads != nil {
			got = map[bool]string{true: "true", false: "false"}[*a.ShowPayloads]
		}
		if got != c.want {
			t.Errorf("%v EMQ_ADMIN_SHOW_PAYLOADS=%q: %s, want %s", c.args, c.env, got, c.want)
		}
	}
}

// emq jobs show with the read-only token: the size, not the payload;
// --payload is refused by name. emq tail prints who read one.
func TestJobsShowHidesPayloadsFromReadToken(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fastBroker, func(o *admin.Options) { o.Token, o.ReadToken = "tok", "read-tok" })
	client := bt.Dial(t, b.Frontend(), "c")
	id := client.Request("q", "", []byte("card 4111-1111"))
	read := []string{"--admin", b.AdminAddr(), "--admin-token", "read-tok"}
	out := mustEmq(t, append([]string{"jobs", "show", id}, read...)...)
	if strings.Contains(out, "4111") || !regexp.MustCompile(`payload size\s+14\n`).MatchString(out) || !strings.Contains(out, "(hidden") {
		t.Errorf("show with the read-only token:\n%s", out)
	}
	_, stderr, err := emq(t, "", append([]string{"jobs", "show", id, "--payload"}, read...)...)
	if err == nil || strings.Contains(stderr, "4111") || !strings.Contains(stderr, "full admin token") {
		t.Errorf("show --payload with the read-only token: %v\n%s", err, stderr)
	}
	if out := mustEmq(t, "jobs", "show", id, "--payload", "--admin", b.AdminAddr(), "--admin-token", "tok"); !strings.Contains(out, "4111") {
		t.Errorf("show --payload with the admin token:\n%s", out)
	}

	// The read above is an event, as emq tail prints it.
	line := eventLine(broker.Event{Kind: broker.EventPayloadRead, Queue: "q", MsgID: id, Reason: "payload", By: "admin", From: "127.0.0.1:5000"})
	if !strings.Contains(line, `payload_read queue="q" msgid="`+id+`" reason="payload" by="admin" from="127.0.0.1:5000"`) {
		t.Errorf("tail's line: %s", line)
	}
}
