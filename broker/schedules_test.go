package broker_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// clock is a schedules' clock the test moves (Options.Now).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// set moves the clock and makes the broker plan by it.
func (c *clock) set(b *bt.Broker, t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
	broker.Replan(b.Broker)
}

// runPayload is an EventMQ payload as its client's schedule() sends it.
const runPayload = `["run", {"callable": "tick", "path": "app.tasks", "args": [], "kwargs": {}, "class_args": [], "class_kwargs": {}}]`

// scheduleFrames sends SCHEDULE or UNSCHEDULE as EventMQ's client does and
// returns the message's id.
func scheduleFrames(p *bt.Peer, cmd, queue, headers, interval, payload, cron string) string {
	id := emqp.NewID()
	p.SendFrames([]byte(""), []byte("eMQP/1.0"), []byte(cmd), []byte(id), []byte(queue), []byte(headers),
		[]byte(interval), []byte(payload), []byte(cron))
	return id
}

// expectAck receives the ACK of msgid.
func expectAck(t *testing.T, p *bt.Peer, msgid string) {
	t.Helper()
	m := p.Recv()
	if a, ok := m.(*emqp.Ack); !ok || a.AckedID != msgid {
		t.Fatalf("got %T %+v, want the ACK of %s", m, m, msgid)
	}
}

// A schedule kept by the broker: stored and ACKed, fired at once and then
// every interval, its jobs those of an ordinary REQUEST with the
// schedule's queue and payload; the same SCHEDULE again is the same
// schedule; UNSCHEDULE (as EventMQ's client sends it: interval -1, no
// cron) removes it.
func TestKeptScheduleFiresUntilUnscheduled(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fast(o) }, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "ticks")
	worker.Ready(10)
	for range 2 { // the second is the same schedule
		id := scheduleFrames(client, "SCHEDULE", "ticks", "guarantee", "1", runPayload, "")
		expectAck(t, client, id)
	}
	var fires []string
	for len(fires) < 3 {
		r := bt.Expect[*emqp.Request](worker)
		if r.Queue != "ticks" || string(r.Payload) != runPayload {
			t.Fatalf("a fire's job: queue %q payload %q", r.Queue, r.Payload)
		}
		fires = append(fires, r.MsgID)
		worker.Reply(r.MsgID, nil)
	}
	if fires[0] == fires[1] || fires[1] == fires[2] {
		t.Fatalf("fires %v: each due time is one job", fires)
	}
	id := scheduleFrames(client, "UNSCHEDULE", "ticks", "guarantee", "-1", runPayload, "")
	expectAck(t, client, id)
	if n := metricCount(t, b, "emq_schedules", "active"); n != 0 {
		t.Fatalf("%v schedules active after UNSCHEDULE", n)
	}
	j := b.Journal(t)
	if err := j.LoadSchedules(func(s *store.Schedule) error { return errors.New("schedule " + s.ID + " is still stored") }); err != nil {
		t.Fatal(err)
	}
}

// metricCount reads a gauge through a broker's admin API.
func metricCount(t *testing.T, b *bt.Broker, name, label string) float64 {
	t.Helper()
	if b.AdminAddr() == "" {
		t.Fatal("the broker has no admin API")
	}
	return bt.MetricValue(t, bt.ScrapeMetrics(t, b), name, label)
}

// Bad schedules are refused with bad_request naming the problem, and
// nothing is stored.
func TestBadSchedulesAreRefused(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fast(o) }, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	for _, c := range []struct{ headers, interval, cron, says string }{
		{"", "0", "", "interval_secs 0"},
		{"", "-1", "61 * * * *", "cron expression"},
		{"", "-1", "* * * * * *", "cron expression"},
		{"nohaste", "-1", "0 0 30 2 *", "no such time"},
		{"tz:Mars/Olympus", "-1", "@hourly", "tz:Mars/Olympus"},
		{"run_count:x", "5", "", "run_count"},
		{"", "8000000000", "", "interval_secs 8000000000"},
		{"", "-1", "@every 2000000h", "over 100 years"},
		{"tz:Europe/Berlin", "-1", "CRON_TZ=Asia/Tokyo 0 3 * * *", "time zone once"},
		{"timeout:soon", "60", "", "timeout"},
		{"schedule-id:" + strings.Repeat("x", 300), "60", "", "schedule id"},
	} {
		id := scheduleFrames(client, "SCHEDULE", "q", c.headers, c.interval, "x", c.cron)
		e := bt.Expect[*emqp.Error](client)
		if e.RefMsgID != id || e.Code != emqp.CodeBadRequest || !strings.Contains(e.Text, c.says) {
			t.Errorf("%+v: ERROR %s %q, want bad_request naming %q", c, e.Code, e.Text, c.says)
		}
	}
	if n := metricCount(t, b, "emq_schedules", "active"); n != 0 {
		t.Fatalf("%v schedules stored from bad SCHEDULEs", n)
	}
}

// On a clock the test controls: cron times in UTC and in a time zone,
// nohaste, run_count, and pause and resume.
func TestScheduleTimes(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Date(2026, 3, 2, 11, 59, 30, 0, time.UTC)}
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fast(o); o.Now = c.Now }, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "noon,ny,thrice")
	worker.Ready(100)
	expect := func(want string) {
		t.Helper()
		r := bt.Expect[*emqp.Request](worker)
		if r.MsgID != want {
			t.Fatalf("fire %s, want %s", r.MsgID, want)
		}
		worker.Reply(r.MsgID, nil)
	}
	noon := scheduleFrames(client, "SCHEDULE", "noon", "nohaste,schedule-id:noon", "-1", "noon job", "0 12 * * *")
	expectAck(t, client, noon)
	ny := scheduleFrames(client, "SCHEDULE", "ny", "nohaste,tz:America/New_York,schedule-id:ny", "-1", "ny job", "0 12 * * *")
	expectAck(t, client, ny)
	thrice := scheduleFrames(client, "SCHEDULE", "thrice", "run_count:3,schedule-id:thrice", "600", "three times", "")
	expectAck(t, client, thrice)
	start := c.Now()
	expect(broker.FireID("thrice", start)) // at once: no nohaste

	c.set(b, time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	expect(broker.FireID("noon", time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)))
	c.set(b, start.Add(600*time.Second))
	expect(broker.FireID("thrice", start.Add(600*time.Second)))

	// Paused, it misses its time; resumed, it fires once for it.
	if err := b.PauseSchedule(t.Context(), "thrice", true); err != nil {
		t.Fatal(err)
	}
	c.set(b, start.Add(1900*time.Second))
	worker.Sync() // nothing came while paused
	if err := b.PauseSchedule(t.Context(), "thrice", false); err != nil {
		t.Fatal(err)
	}
	expect(broker.FireID("thrice", start.Add(1200*time.Second))) // its third and last
	c.set(b, time.Date(2026, 3, 2, 17, 0, 0, 0, time.UTC))       // noon in New York
	expect(broker.FireID("ny", time.Date(2026, 3, 2, 17, 0, 0, 0, time.UTC)))
	worker.Sync()
	if n := metricCount(t, b, "emq_schedules", "active"); n != 2 {
		t.Fatalf("%v schedules active, want noon and ny (thrice ended)", n)
	}
}

// Fires missed while no broker ran: one catch-up fire, for the first
// missed due time, then on from the next due time after the start; none
// with misfire:skip, unless the gap was under a minute.
func TestMissedFiresCatchUpOnce(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	opts := func(o *broker.Options) { fast(o); o.Now = c.Now }
	b := bt.Start(t, "", opts)
	client := bt.Dial(t, b.Frontend(), "c")
	expectAck(t, client, scheduleFrames(client, "SCHEDULE", "q", "nohaste,schedule-id:catch", "60", "x", ""))
	expectAck(t, client, scheduleFrames(client, "SCHEDULE", "q", "nohaste,misfire:skip,schedule-id:skip", "60", "y", ""))
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	start := c.Now()
	c.mu.Lock()
	c.now = start.Add(10*time.Minute + 30*time.Second) // ten due times missed
	c.mu.Unlock()
	b2 := bt.Start(t, b.Dir, opts)
	worker := bt.Worker(t, b2.Backend(), "w", "q")
	worker.Ready(10)
	r := bt.Expect[*emqp.Request](worker)
	if want := broker.FireID("catch", start.Add(time.Minute)); r.MsgID != want {
		t.Fatalf("catch-up fire %s, want the first missed due time's %s", r.MsgID, want)
	}
	worker.Reply(r.MsgID, nil)
	worker.Sync() // one, and none for misfire:skip
	c.set(b2, start.Add(11*time.Minute))
	for range 2 {
		r = bt.Expect[*emqp.Request](worker)
		if r.MsgID != broker.FireID("catch", start.Add(11*time.Minute)) && r.MsgID != broker.FireID("skip", start.Add(11*time.Minute)) {
			t.Fatalf("fire %s, want both schedules at the next due time after the start", r.MsgID)
		}
		worker.Reply(r.MsgID, nil)
	}

	// A due time found less than a minute past (a quick restart) is not
	// missed: it fires even with misfire:skip.
	worker.Sync() // the REPLYs are handled
	if err := b2.Stop(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.now = start.Add(12*time.Minute + 30*time.Second)
	c.mu.Unlock()
	b3 := bt.Start(t, b.Dir, opts)
	worker = bt.Worker(t, b3.Backend(), "w", "q")
	worker.Ready(10)
	got := map[string]bool{}
	for range 2 {
		got[bt.Expect[*emqp.Request](worker).MsgID] = true
	}
	if !got[broker.FireID("catch", start.Add(12*time.Minute))] || !got[broker.FireID("skip", start.Add(12*time.Minute))] {
		t.Fatalf("after a 30-second gap: fires %v, want both schedules' due time", got)
	}
}

// A schedule replaced within the second its first fire was made (both
// due at once) makes its own first job: fires are named by their due
// time to the nanosecond, not by the second.
func TestScheduleReplacedAtOnceFiresAgain(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(10)
	for _, payload := range []string{"first", "second"} {
		expectAck(t, client, scheduleFrames(client, "SCHEDULE", "q", "run_count:1,schedule-id:x", "3600", payload, ""))
		if r := bt.Expect[*emqp.Request](worker); string(r.Payload) != payload {
			t.Fatalf("job %q, want the %s schedule's", r.Payload, payload)
		}
	}
}

// The same SCHEDULE as the kept one, sent while another of its id is
// being stored, is stored again after it: the last one sent holds.
func TestSameScheduleDuringAChangeIsStoredAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := &clock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	b := bt.Start(t, dir, func(o *broker.Options) { fast(o); o.Now = c.Now })
	client := bt.Dial(t, b.Frontend(), "c")
	expectAck(t, client, scheduleFrames(client, "SCHEDULE", "q", "nohaste,schedule-id:x", "60", "A", ""))
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	b = bt.Start(t, dir, func(o *broker.Options) {
		fast(o)
		o.Now = c.Now
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return heldJournal{j, release} })
	})
	client = bt.Dial(t, b.Frontend(), "c")
	toB := scheduleFrames(client, "SCHEDULE", "q", "nohaste,schedule-id:x", "60", "B", "")
	backToA := scheduleFrames(client, "SCHEDULE", "q", "nohaste,schedule-id:x", "60", "A", "")
	client.Sync()
	close(release)
	acked := map[string]bool{}
	for range 2 {
		acked[bt.Expect[*emqp.Ack](client).AckedID] = true
	}
	if !acked[toB] || !acked[backToA] {
		t.Fatalf("ACKs of %v, want both SCHEDULEs'", acked)
	}
	ss, err := b.Journal(t).GetSchedule("x")
	if err != nil || string(ss.Payload) != "A" {
		t.Fatalf("stored: %+v %v, want the last one sent (A)", ss, err)
	}
}

// While its queue holds MaxPending jobs a schedule's fires make no job;
// it goes on, and makes jobs again when the queue has room.
func TestScheduleFiresWaitForRoomInTheirQueue(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fast(o); o.Now = c.Now; o.MaxPending = 1 }, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	expectAck(t, client, scheduleFrames(client, "SCHEDULE", "q", "schedule-id:x", "60", "x", ""))
	start := c.Now()
	bt.Eventually(t, "the first fire", func() bool { return b.Stats().SchedulesFired == 1 })
	c.set(b, start.Add(time.Minute)) // the queue is full: no job
	bt.Eventually(t, "the second due time passed, skipped", func() bool { return b.Stats().FiresSkipped == 1 })
	if n := metricCount(t, b, "emq_schedule_fires_skipped_total", ""); n != 1 {
		t.Fatalf("%v fires counted as skipped, want 1", n)
	}
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(10)
	r := bt.Expect[*emqp.Request](worker)
	if r.MsgID != broker.FireID("x", start) {
		t.Fatalf("job %s, want the first fire's", r.MsgID)
	}
	worker.Reply(r.MsgID, nil)
	worker.Sync()
	c.set(b, start.Add(2*time.Minute))
	if r := bt.Expect[*emqp.Request](worker); r.MsgID != broker.FireID("x", start.Add(2*time.Minute)) {
		t.Fatalf("job %s, want the third due time's", r.MsgID)
	}
}

// A schedule whose fires the journal cannot store (its limit lowered
// since the schedule was added) is paused, not retried without end.
func TestScheduleThatCannotFireIsPaused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	journalWith(t, dir, &store.Schedule{ID: "big", Queue: "q", Payload: make([]byte, 8000), Every: time.Hour, Next: now, Left: -1, Created: now})
	b := bt.Start(t, dir, func(o *broker.Options) { fast(o); o.MaxJobSize = 4096 })
	bt.Eventually(t, "the schedule paused", func() bool {
		ss, _, err := b.Schedules("", 0)
		return err == nil && len(ss) == 1 && ss[0].Paused && ss[0].Fires == 0
	})
}

// A schedule added to a stopped broker's journal, to fire at once, fires
// when a broker starts, even with misfire:skip and long after it was
// added: its first fire was never due while a broker ran.
func TestAtOnceFireOfAScheduleAddedOffline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	added := time.Now().Add(-time.Hour)
	journalWith(t, dir, &store.Schedule{ID: "x", Queue: "q", Headers: "misfire:skip", Every: 24 * time.Hour, Next: added, Left: -1, Created: added})
	b := bt.Start(t, dir, fast)
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	if r := bt.Expect[*emqp.Request](worker); r.MsgID != broker.FireID("x", added) {
		t.Fatalf("job %s, want the at-once fire", r.MsgID)
	}
}
