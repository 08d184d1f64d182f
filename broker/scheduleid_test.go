package broker

import (
	"testing"

	"github.com/eventmq/emq/emqp"
)

// Schedule ids of EventMQ payloads are what EventMQ's scheduler computes:
// the expected ids were made with Python 3's json.dumps(..., sort_keys=True)
// and hashlib.sha1, as scheduler.py does.
func TestEventMQScheduleIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ payload, id string }{
		{`["run", {"callable": "tick", "path": "app.tasks", "args": [1, 2.5, "x"], "kwargs": {"b": true, "a": null}, "class_args": [], "class_kwargs": {}}]`,
			"1d02bd46f2a10d69c32d6fd7b0414d1a2186c3d4"},
		{`["run", {"args": ["\u00e9", "\u007f", "\ud83d\ude00", "\n\t\"\\/"], "kwargs": {"z": [1e16, 1.5e16, 0.0001, 0.00001, 123456789.0, -0.0, 1e-7]}, "class_args": [10], "class_kwargs": {"k": {"y": 1, "x": 2}}, "path": "p", "callable": "c"}]`,
			"940982acaa31ab18d11db6ef9b6aca3d023a4bb2"},
		{`["run", {"callable": "add", "path": "mathjobs", "args": [], "kwargs": {}, "class_args": [], "class_kwargs": {}}]`,
			"f76f98259747d5bbc5a34c881c8dd7de5673822f"},
	} {
		if got := scheduleID("default", emqp.Headers{}, []byte(c.payload)); got != c.id {
			t.Errorf("%s: id %s, want EventMQ's %s", c.payload, got, c.id)
		}
	}
	h, _ := emqp.ParseHeaders("schedule-id:nightly-report")
	if got := scheduleID("q", h, []byte(`["run", {}]`)); got != "nightly-report" {
		t.Errorf("with a schedule-id header: %s", got)
	}
	a, b := scheduleID("q1", emqp.Headers{}, []byte("x")), scheduleID("q2", emqp.Headers{}, []byte("x"))
	if a == b || len(a) != 40 {
		t.Errorf("other payloads: %s and %s; want a hash of queue and payload each", a, b)
	}
}
