package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// sendSchedule sends a SCHEDULE as EventMQ's Python client does.
func sendSchedule(p *bt.Peer, cmd, interval, cron string) string {
	id := emqp.NewID()
	p.SendFrames([]byte(""), []byte("eMQP/1.0"), []byte(cmd), []byte(id), []byte("default"), []byte("guarantee"),
		[]byte(interval), []byte(`["run", {"path": "app.tasks", "callable": "tick", "args": [], "kwargs": {}}]`), []byte(cron))
	return id
}

// forwarding is a broker that passes schedules to EventMQ schedulers.
func forwarding(o *broker.Options) { fast(o); o.ForwardSchedules = true }

// With forward-schedules, SCHEDULE and UNSCHEDULE go to the schedulers as
// EventMQ's router sends them: one scheduler in turn for SCHEDULE, all for
// UNSCHEDULE.
func TestSchedulesGoToSchedulers(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", forwarding)
	client := bt.Dial(t, b.Frontend(), "client")

	id := sendSchedule(client, "SCHEDULE", "60", "")
	if e := bt.Expect[*emqp.Error](client); e.Code != emqp.CodeUnavailable || e.RefMsgID != id || !strings.Contains(e.Text, "no scheduler") {
		t.Fatalf("without a scheduler: ERROR %+v, want unavailable for %s", e, id)
	}

	// A scheduler may connect to either endpoint; its role comes from its INFORM.
	s1 := bt.Dial(t, b.Frontend(), "s1")
	s2 := bt.Dial(t, b.Backend(), "s2")
	for _, s := range []*bt.Peer{s1, s2} {
		s.InformScheduler()
		s.RecvHeartbeat()
		s.KeepAlive(50 * time.Millisecond)
	}

	got := map[*bt.Peer]string{}
	for range 2 {
		id := sendSchedule(client, "SCHEDULE", "-1", "*/5 * * * *")
		for _, s := range []*bt.Peer{s1, s2} {
			if _, done := got[s]; done {
				continue
			}
			m, ok := s.TryRecv(bt.Wait)
			if !ok {
				t.Fatal("a SCHEDULE reached no scheduler")
			}
			sc, ok := m.(*emqp.Schedule)
			if !ok || sc.MsgID != id || sc.Queue != "default" || sc.Interval != -1 || sc.Cron != "*/5 * * * *" ||
				!strings.Contains(string(sc.Payload), `"callable": "tick"`) || !sc.Headers.Guarantee() {
				t.Fatalf("scheduler got %T %+v, want the client's SCHEDULE %s unchanged", m, m, id)
			}
			got[s] = id
			break
		}
	}
	if len(got) != 2 {
		t.Fatalf("two SCHEDULEs went to %d schedulers, want one each", len(got))
	}

	id = sendSchedule(client, "UNSCHEDULE", "-1", "*/5 * * * *")
	for _, s := range []*bt.Peer{s1, s2} {
		if u := bt.Expect[*emqp.Unschedule](s); u.MsgID != id {
			t.Fatalf("UNSCHEDULE %s, want %s", u.MsgID, id)
		}
	}

	// A scheduler is not a worker: it gets no jobs and is not listed.
	client.Request("default", "", []byte("job"))
	workers, err := b.Workers(context.Background())
	if err != nil || len(workers) != 0 {
		t.Fatalf("workers %+v (%v), want none", workers, err)
	}
	// Its own REQUESTs (a schedule that is due) are jobs like any other.
	s1.Request("default", "", []byte("due"))

	// Goodbye: the other one gets every SCHEDULE; then nobody is left.
	s1.Send(&emqp.Kbye{MsgID: emqp.NewID()})
	bt.Eventually(t, "s1 forgotten", func() bool {
		// Until the broker has read s1's KBYE, every second SCHEDULE goes to s1.
		id := sendSchedule(client, "SCHEDULE", "60", "")
		m, ok := s2.TryRecv(100 * time.Millisecond)
		sc, isSched := m.(*emqp.Schedule)
		return ok && isSched && sc.MsgID == id
	})
	for range 3 {
		id := sendSchedule(client, "SCHEDULE", "60", "")
		for { // skipping any SCHEDULE of the wait above that came late
			if sc := bt.Expect[*emqp.Schedule](s2); sc.MsgID == id {
				break
			}
		}
	}
	if got := b.Stats().SchedulesForwarded; got < 6 {
		t.Errorf("%d schedules counted, want at least 6", got)
	}
}

// A silent scheduler is forgotten after the heartbeat timeout, like a
// silent worker.
func TestSilentSchedulerIsForgotten(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", forwarding)
	client := bt.Dial(t, b.Frontend(), "client")
	s := bt.Dial(t, b.Frontend(), "quiet")
	s.InformScheduler()
	// Until then SCHEDULEs go to it and the client hears nothing.
	bt.Eventually(t, "the silent scheduler forgotten", func() bool {
		sendSchedule(client, "SCHEDULE", "60", "")
		m, ok := client.TryRecv(100 * time.Millisecond)
		e, isErr := m.(*emqp.Error)
		return ok && isErr && e.Code == emqp.CodeUnavailable
	})
	if n := b.Stats().SchedulesForwarded; n == 0 {
		t.Error("no SCHEDULE reached the scheduler while it was known")
	}
}

// A scheduler whose connection is gone gets no SCHEDULE, even before its
// heartbeat timeout: it would be lost. With none connected the client is
// told.
func TestSchedulerConnectionLost(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { forwarding(o); o.HeartbeatTimeout = time.Minute })
	client := bt.Dial(t, b.Frontend(), "client")
	gone := bt.Dial(t, b.Frontend(), "gone")
	gone.InformScheduler()
	gone.Close()
	bt.Eventually(t, "SCHEDULE refused once the only scheduler's connection is gone", func() bool {
		id := sendSchedule(client, "SCHEDULE", "60", "")
		m, ok := client.TryRecv(100 * time.Millisecond)
		e, isErr := m.(*emqp.Error)
		return ok && isErr && e.RefMsgID == id && e.Code == emqp.CodeUnavailable
	})
	id := sendSchedule(client, "UNSCHEDULE", "60", "")
	if e := bt.Expect[*emqp.Error](client); e.RefMsgID != id || e.Code != emqp.CodeUnavailable {
		t.Fatalf("UNSCHEDULE with no scheduler connected: %+v", e)
	}
	live := bt.Dial(t, b.Frontend(), "live")
	live.InformScheduler()
	for range 3 {
		id := sendSchedule(client, "SCHEDULE", "60", "")
		if sc := bt.Expect[*emqp.Schedule](live); sc.MsgID != id {
			t.Fatalf("SCHEDULE %s, want %s", sc.MsgID, id)
		}
	}
}

// Without forward-schedules an EventMQ scheduler peer is still accepted
// and its REQUESTs are ordinary jobs, but a client's SCHEDULE is kept by
// the broker: the scheduler never sees it.
func TestSchedulerPeerWhileTheBrokerKeepsSchedules(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	s := bt.Dial(t, b.Frontend(), "s")
	s.InformScheduler()
	s.KeepAlive(50 * time.Millisecond)
	worker := bt.Worker(t, b.Backend(), "w", "default")
	worker.Ready(10)
	job := s.Request("default", "", []byte("from the scheduler"))
	if r := bt.Expect[*emqp.Request](worker); r.MsgID != job {
		t.Fatalf("worker got %s, want the scheduler's REQUEST %s", r.MsgID, job)
	} else {
		worker.Reply(r.MsgID, nil)
	}
	client := bt.Dial(t, b.Frontend(), "c")
	expectAck(t, client, sendSchedule(client, "SCHEDULE", "3600", ""))
	if r := bt.Expect[*emqp.Request](worker); !strings.HasPrefix(r.MsgID, "schedule-") {
		t.Fatalf("worker got %s, want the kept schedule's first fire", r.MsgID)
	}
	s.Sync() // the scheduler got nothing but heartbeats: schedules are the broker's
}
