package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// emq send --bulk FILE: JSON lines stored in BULKs of --bulk-size, their
// msgids printed in order; a bad job refuses its BULK, named by line.
func TestSendBulkFile(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	lines := `{"queue": "q", "payload": "one", "msgid": "m1"}
{"payload_b64": "AP8=", "headers": "priority:5"}

{"queue": "q", "payload": "three", "headers": {"timeout": 30, "reply-requested": true}}
`
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := emq(t, "", "send", "--broker", b.Frontend(), "--queue", "q", "--bulk", file, "--bulk-size", "2")
	if err != nil {
		t.Fatalf("send --bulk: %v\n%s", err, stderr)
	}
	ids := strings.Fields(out)
	if len(ids) != 3 || ids[0] != "m1" {
		t.Fatalf("printed %q, want 3 msgids, m1 first", out)
	}
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(3)
	want := map[string]string{ids[0]: "one", ids[1]: "\x00\xff", ids[2]: "three"}
	for range 3 {
		r := bt.Expect[*emqp.Request](w)
		if string(r.Payload) != want[r.MsgID] {
			t.Fatalf("job %s: %q, want %q", r.MsgID, r.Payload, want[r.MsgID])
		}
		if r.MsgID == ids[2] {
			if d, err := r.Headers.Timeout(); err != nil || d.Seconds() != 30 {
				t.Fatalf("the object's headers read as %v", r.Headers)
			}
		}
	}

	bad := `{"queue": "r", "payload": "a"}
{"queue": "r", "payload": "b", "headers": "priority:99999"}
`
	_, stderr, err = emq(t, bad, "send", "--broker", b.Frontend(), "--bulk", "-")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(stderr, "line 2") || !strings.Contains(stderr, "bad_request") {
		t.Fatalf("a bad line: %v, stderr %q", err, stderr)
	}
	_, stderr, err = emq(t, `{"queue": "r", "payload": "a", "colour": "blue"}`, "send", "--broker", b.Frontend(), "--bulk", "-")
	if !errors.As(err, &exit) || !strings.Contains(stderr, "line 1") || !strings.Contains(stderr, "colour") {
		t.Fatalf("an unknown field: %v, stderr %q", err, stderr)
	}
}

// A 70,000-byte queue name is refused in a line, not echoed whole.
func TestSendLongQueueNameRefusedShort(t *testing.T) {
	t.Parallel()
	_, stderr, err := emq(t, "", "send", "--broker", bt.FreeEndpoint(t), "--queue", strings.Repeat("q", 70000), "x")
	if err == nil || len(stderr) > 300 || !strings.Contains(stderr, "(70000 bytes)") {
		t.Fatalf("send to a 70,000-byte queue name: %v, %d bytes of stderr, want a short refusal naming the length", err, len(stderr))
	}
}

// A call refused before it was sent (a bad queue name) keeps its own
// error even when the broker's absence has ended the send's context
// meanwhile; only a call that ended with the context says nobody listens.
func TestNotListeningOnlyForCallsItEnded(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("tcp://127.0.0.1:1: %w", errNotListening))
	refused := errors.New("client: queue name too long")
	if err := sendError(ctx, refused); err != refused {
		t.Errorf("a refused call: %v, want its own error", err)
	}
	if err := sendError(ctx, fmt.Errorf("client: no ACK: %w", ctx.Err())); !errors.Is(err, errNotListening) {
		t.Errorf("a call the context ended: %v, want nothing listens", err)
	}
}
