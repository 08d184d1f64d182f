package admin_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// Schedules through /api/v1/schedules: added, listed, shown with the
// payload, paused, resumed and removed; bad ones are 400 naming the
// problem.
func TestSchedulesAPI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	code, text := bt.Post(t, b, "/api/v1/schedules", admin.ScheduleSpec{Queue: "q", Every: "1h", Headers: "nohaste,schedule-id:hourly", Payload: "hello"})
	var si admin.ScheduleInfo
	if code != http.StatusOK || json.Unmarshal([]byte(text), &si) != nil || si.ID != "hourly" || si.Every != "1h0m0s" || si.Left != -1 {
		t.Fatalf("add: %d %s", code, text)
	}
	for _, c := range []struct {
		spec admin.ScheduleSpec
		says string
	}{
		{admin.ScheduleSpec{Queue: "q", Cron: "61 * * * *"}, "cron expression"},
		{admin.ScheduleSpec{Queue: "q"}, "give every (an interval) or cron"},
		{admin.ScheduleSpec{Queue: "q", Every: "1m", Cron: "@daily"}, "not both"},
		{admin.ScheduleSpec{Queue: "q", Every: "1.5s"}, "whole seconds"},
		{admin.ScheduleSpec{Every: "1s"}, "queue name"},
		{admin.ScheduleSpec{Queue: "q", Every: "1s", PayloadBase64: "%%"}, "payload_base64"},
	} {
		if code, text := bt.Post(t, b, "/api/v1/schedules", c.spec); code != http.StatusBadRequest || !strings.Contains(text, c.says) {
			t.Errorf("%+v: %d %s, want 400 naming %q", c.spec, code, text, c.says)
		}
	}
	var list admin.SchedulePage
	if code := bt.API(t, b, "GET", "/api/v1/schedules", "", &list); code != http.StatusOK || len(list.Schedules) != 1 || list.Schedules[0].ID != "hourly" {
		t.Fatalf("list: %d %+v", code, list)
	}
	// By pages, in id order.
	for _, id := range []string{"a", "b", "c"} {
		if code, text := bt.Post(t, b, "/api/v1/schedules", admin.ScheduleSpec{Queue: "q", Cron: "@daily", Headers: "schedule-id:" + id}); code != http.StatusOK {
			t.Fatalf("add %s: %d %s", id, code, text)
		}
	}
	var ids []string
	for after := ""; ; after = list.Next {
		list = admin.SchedulePage{}
		if code := bt.API(t, b, "GET", "/api/v1/schedules?limit=3&after="+after, "", &list); code != http.StatusOK {
			t.Fatalf("list after %q: %d", after, code)
		}
		for _, s := range list.Schedules {
			ids = append(ids, s.ID)
		}
		if list.Next == "" {
			break
		}
	}
	if strings.Join(ids, " ") != "a b c hourly" {
		t.Fatalf("listed by threes: %v", ids)
	}
	if code := bt.API(t, b, "GET", "/api/v1/schedules?limit=0", "", nil); code != http.StatusBadRequest {
		t.Fatalf("limit 0: %d, want 400", code)
	}
	for _, id := range []string{"a", "b", "c"} {
		bt.API(t, b, "DELETE", "/api/v1/schedules/"+id, "", nil)
	}
	if code := bt.API(t, b, "GET", "/api/v1/schedules/hourly?payload=1", "", &si); code != http.StatusOK || si.Payload != base64.StdEncoding.EncodeToString([]byte("hello")) {
		t.Fatalf("show: %d %+v", code, si)
	}
	for _, action := range []string{"pause", "resume"} {
		if code := bt.API(t, b, "POST", "/api/v1/schedules/hourly/"+action, "", nil); code != http.StatusOK {
			t.Fatalf("%s: %d", action, code)
		}
		bt.API(t, b, "GET", "/api/v1/schedules/hourly", "", &si)
		if si.Paused != (action == "pause") {
			t.Fatalf("after %s: paused %v", action, si.Paused)
		}
	}
	if n := bt.MetricValue(t, bt.ScrapeMetrics(t, b), "emq_schedules", "active"); n != 1 {
		t.Fatalf("%v schedules active", n)
	}
	if code := bt.API(t, b, "DELETE", "/api/v1/schedules/hourly", "", nil); code != http.StatusOK {
		t.Fatalf("rm: %d", code)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/schedules/hourly"}, {"DELETE", "/api/v1/schedules/hourly"}, {"POST", "/api/v1/schedules/hourly/pause"},
	} {
		if code := bt.API(t, b, c.method, c.path, "", nil); code != http.StatusNotFound {
			t.Errorf("%s %s of a removed schedule: %d, want 404", c.method, c.path, code)
		}
	}
}
