package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// GET /api/v1/queues/{queue} gives an autoscaler one queue's load: what
// waits, for how long, what runs, and the room its workers offer.
func TestQueueLoad(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", nil, nil)
	load := func(path string) (broker.QueueLoad, int) {
		var ql broker.QueueLoad
		return ql, bt.API(t, b, "GET", path, "", &ql)
	}
	if code := bt.API(t, b, "POST", "/api/v1/queues/email/pause", "", nil); code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}
	client := bt.Dial(t, b.Frontend(), "c")
	for range 3 {
		client.Request("email", "", []byte("x"))
	}
	w := bt.Worker(t, b.Backend(), "w", "email")
	w.Ready(2)
	bt.Eventually(t, "the worker's 2 slots offered", func() bool {
		ql, code := load("/api/v1/queues/email")
		return code == http.StatusOK && ql.FreeSlots == 2
	})
	ql, _ := load("/api/v1/queues/email")
	if ql.Name != "email" || ql.Pending != 3 || ql.InFlight != 0 || ql.Workers != 1 || !ql.Paused || ql.OldestPendingAge <= 0 {
		t.Errorf("paused, 3 jobs, a worker with 2 slots: %+v", ql)
	}

	if code := bt.API(t, b, "POST", "/api/v1/queues/email/resume", "", nil); code != http.StatusOK {
		t.Fatalf("resume: %d", code)
	}
	bt.Eventually(t, "2 jobs dispatched", func() bool {
		ql, _ := load("/api/v1/queues/email")
		return ql.InFlight == 2
	})
	if ql, _ := load("/api/v1/queues/email"); ql.Pending != 1 || ql.FreeSlots != 0 || ql.OldestPendingAge <= 0 {
		t.Errorf("resumed: %+v", ql)
	}

	// A queue the broker does not know: 404 by name, or empty when asked.
	var refusal struct{ Error, Code string }
	if code := bt.API(t, b, "GET", "/api/v1/queues/nosuch", "", nil); code != http.StatusNotFound {
		t.Errorf("an unknown queue: %d, want 404", code)
	}
	resp, err := http.Get("http://" + b.AdminAddr() + "/api/v1/queues/nosuch")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if refusal.Code != "not_found" || refusal.Error == "" {
		t.Errorf("an unknown queue's refusal: %+v", refusal)
	}
	if ql, code := load("/api/v1/queues/nosuch?unknown=empty"); code != http.StatusOK || ql != (broker.QueueLoad{QueueInfo: broker.QueueInfo{Name: "nosuch"}}) {
		t.Errorf("an unknown queue, asked as empty: %d %+v", code, ql)
	}
	if _, code := load("/api/v1/queues/email?unknown=zero"); code != http.StatusBadRequest {
		t.Errorf("unknown=zero: %d, want 400", code)
	}
}
