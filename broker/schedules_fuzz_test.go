package broker

import (
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
)

// Whatever a SCHEDULE's frames say, making the schedule does not panic,
// and a schedule made can be held again as the journal stores it (a
// stored schedule the broker cannot read would never fire), its first due
// time neither zero nor before now, its next after the first.
func FuzzMakeSchedule(f *testing.F) {
	f.Add("q", "guarantee", 60, "", []byte(`["run", {"path": "a", "callable": "b", "args": [1.5, "\u00e9"]}]`))
	f.Add("q", "nohaste,tz:Europe/Berlin", -1, "0 3 * * 1-5", []byte("x"))
	f.Add("q", "run_count:2,schedule-id:x", -1, "@every 5m", []byte(""))
	f.Add("q", "nohaste", -1, "0 0 30 2 *", []byte("never"))
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, queue, headers string, interval int, cron string, payload []byte) {
		h, err := emqp.ParseHeaders(headers)
		if err != nil {
			return
		}
		ss, err := MakeSchedule(queue, h, interval, cron, payload, now)
		if err != nil {
			return
		}
		s, err := scheduleFromStore(ss)
		if err != nil {
			t.Fatalf("made %+v, which cannot be held again: %v", ss, err)
		}
		if ss.Next.IsZero() || ss.Next.Before(now) {
			t.Fatalf("first due time %v, now %v", ss.Next, now)
		}
		if next := s.when.after(ss.Next, ss.Next); !next.After(ss.Next) && !next.IsZero() {
			t.Fatalf("after %v comes %v", ss.Next, next)
		}
		if fireID(ss.ID, ss.Next) == fireID(ss.ID, ss.Next.Add(time.Second)) {
			t.Fatal("two due times, one msgid")
		}
	})
}
