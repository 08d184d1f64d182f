package broker

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
	_ "time/tzdata" // tz:Area/City works on machines without a zoneinfo database

	"github.com/robfig/cron/v3"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Schedules are kept by the broker in its journal. A schedule is named by
// an id (scheduleid.go); SCHEDULE stores it (and the ACK says it is
// stored), UNSCHEDULE removes it. Each one in memory is a deadline at its
// next due time. When it is due, the journal makes the fire's job and
// moves the schedule's next due time on, in one transaction
// (store.Journal.FireSchedule), and only then does the job join its
// queue: a crash, a restart or a second broker can neither lose a fire
// nor make two of one. The job's msgid is the schedule's id and the due
// time, so a fire made twice would be one job anyway.
//
// When: every interval_secs seconds (N ≥ 1), keeping its phase; or at the
// times of a cron expression (5 fields, or a descriptor such as @hourly),
// in UTC unless a header tz:Area/City says otherwise. The first fire is
// at once, as in EventMQ, unless the header nohaste is given; run_count:N
// ends the schedule after N fires. A broker late for a due time (it was
// stopped, or busy) fires once and goes on from the next due time after
// now: fires missed while no broker ran are one catch-up fire, or none
// with the header misfire:skip. A due time less than misfireGrace past
// when the broker starts (or the schedule is resumed) is not missed: a
// restart or failover of a few seconds fires it even with misfire:skip.

// misfireGrace: how late a due time may be found and still fire under
// misfire:skip.
const misfireGrace = time.Minute

// schedule is a schedule the loop holds: what it needs to know when it is
// due. Its queue, headers and payload stay in the journal.
type schedule struct {
	id       string
	queue    string
	when     cadence
	next     time.Time // the due time of its next fire (on the broker's clock)
	left     int       // fires left; -1 = no end
	paused   bool
	skipLate bool     // misfire:skip
	missed   bool     // its next due time passed, over misfireGrace, while no broker ran (or it was paused)
	firing   bool     // the journal is making a fire
	sig      [20]byte // of what defines it: the same SCHEDULE again changes nothing
	fires    int
	lastFire time.Time
	due      deadline
}

func (s *schedule) deadline() *deadline { return &s.due }

// cadence is when a schedule is due.
type cadence struct {
	every time.Duration // an interval; 0 for cron
	cron  cron.Schedule
	expr  string
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCadence reads an interval (seconds, ≥ 1) or, for interval -1, a
// cron expression in the time zone tz ("" = UTC).
func parseCadence(interval int, expr, tz string) (cadence, error) {
	if interval != emqp.CronInterval {
		if interval < 1 {
			return cadence{}, fmt.Errorf("interval_secs %d: want a number of seconds of at least 1, or -1 with a cron expression", interval)
		}
		return cadence{every: time.Duration(interval) * time.Second}, nil
	}
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return cadence{}, fmt.Errorf("header tz:%s: not a time zone (want Area/City, as Europe/Berlin): %v", tz, err)
		}
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return cadence{}, fmt.Errorf("cron expression %q: %v (want 5 fields, minute hour day-of-month month day-of-week, or a descriptor such as @hourly)", expr, err)
	}
	if ss, ok := sched.(*cron.SpecSchedule); ok {
		ss.Location = loc
	}
	return cadence{cron: sched, expr: expr}, nil
}

// after is the first due time after now, following due: an interval keeps
// its phase, a cron schedule its times.
func (c cadence) after(due, now time.Time) time.Time {
	if c.cron != nil {
		return c.cron.Next(now)
	}
	if due.After(now) {
		return due
	}
	return due.Add((now.Sub(due)/c.every + 1) * c.every)
}

// first is a new schedule's first due time: now, or with nohaste the
// next one after now.
func (c cadence) first(now time.Time, nohaste bool) time.Time {
	switch {
	case !nohaste:
		return now
	case c.cron != nil:
		return c.cron.Next(now)
	}
	return now.Add(c.every)
}

// fireID is the msgid of a schedule's fire: the same for the same due
// time, whoever makes it.
func fireID(id string, due time.Time) string {
	sum := sha1.Sum([]byte(id))
	return "schedule-" + hex.EncodeToString(sum[:8]) + "-" + strconv.FormatInt(due.Unix(), 10)
}

// now is the time on the schedules' clock (Options.Now).
func (b *Broker) now() time.Time {
	if b.opts.Now != nil {
		return b.opts.Now()
	}
	return time.Now()
}

// plan sets s's deadline at its next due time (none while it is paused).
func (b *Broker) plan(s *schedule) {
	if s.paused || s.firing {
		b.timers.stop(s)
		return
	}
	now := time.Now()
	b.timers.set(s, b.after(now, s.next.Sub(b.now())))
}

// scheduleFromStore makes the loop's schedule of a stored one.
func scheduleFromStore(ss *store.Schedule) (*schedule, error) {
	h, err := emqp.ParseHeaders(ss.Headers)
	if err != nil {
		return nil, err
	}
	interval := emqp.CronInterval
	if ss.Cron == "" {
		interval = int(ss.Every / time.Second)
	}
	tz, _ := h.Get(emqp.HeaderTZ)
	when, err := parseCadence(interval, ss.Cron, tz)
	if err != nil {
		return nil, err
	}
	misfire, _ := h.Get(emqp.HeaderMisfire)
	return &schedule{id: ss.ID, queue: ss.Queue, when: when, next: ss.Next, left: ss.Left, paused: ss.Paused,
		skipLate: misfire == "skip", fires: ss.Fires, lastFire: ss.LastFire, sig: signature(ss)}, nil
}

// signature sums what defines a schedule, so that the same SCHEDULE sent
// again (a client resending it, an application scheduling at each start)
// leaves the schedule as it is instead of starting it over.
func signature(ss *store.Schedule) [20]byte {
	h := sha1.New()
	for _, f := range []string{ss.Queue, ss.Headers, ss.Every.String(), ss.Cron} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	h.Write(ss.Payload)
	var sum [20]byte
	h.Sum(sum[:0])
	return sum
}

// replaySchedules loads every stored schedule; those whose due time passed
// while no broker ran make their catch-up fire first.
func (b *Broker) replaySchedules() (int, error) {
	now := b.now()
	n := 0
	err := b.journal.LoadSchedules(func(ss *store.Schedule) error {
		s, err := scheduleFromStore(ss)
		if err != nil {
			b.log.Error("a stored schedule cannot be read; it is left as it is", "schedule", ss.ID, "err", err)
			return nil
		}
		s.missed = now.Sub(s.next) > misfireGrace
		b.scheds[s.id] = s
		b.plan(s)
		n++
		return nil
	})
	return n, err
}

// scheduleDue: s's due time has come. The journal makes the fire and
// moves s on; s waits meanwhile.
func (b *Broker) scheduleDue(s *schedule) {
	now := b.now()
	if s.next.After(now) { // the clocks disagree: not yet
		b.plan(s)
		return
	}
	due := s.next
	next := s.when.after(due, now)
	msgid := fireID(s.id, due)
	if s.missed && s.skipLate {
		msgid = "" // misfire:skip: no catch-up fire
	}
	s.missed, s.firing = false, true
	b.journal.FireSchedule(s.id, due, next, msgid, func(sj *store.Job, dup bool, err error) {
		b.post(func() { b.fired(s, due, next, sj, dup, err) })
	})
}

// fired is a fire's outcome: its job joins its queue, the schedule waits
// for its next due time (or ends).
func (b *Broker) fired(s *schedule, due, next time.Time, sj *store.Job, dup bool, err error) {
	s.firing = false
	if b.scheds[s.id] != s { // removed or replaced meanwhile
		if sj != nil && !dup {
			b.holdFire(sj)
		}
		return
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		delete(b.scheds, s.id)
		return
	case errors.Is(err, store.ErrWrongState):
		// Made already (by another broker, or before a replace): take
		// the journal's word for what is next.
		b.reloadSchedule(s.id)
		return
	case errors.Is(err, store.ErrFenced):
		b.fence(err)
		return
	case err != nil:
		b.log.Error("journal could not make a schedule's fire; it is tried again", "schedule", s.id, "due", due, "err", err)
		b.timers.set(s, b.after(time.Now(), readRetry))
		return
	}
	if sj != nil {
		s.fires++
		s.lastFire = due
		if s.left > 0 {
			s.left--
		}
		b.stats.SchedulesFired.Add(1)
		b.metrics.fireLateness.Observe(b.now().Sub(due).Seconds())
		if !dup {
			b.holdFire(sj)
		}
	}
	if s.left == 0 || next.IsZero() {
		delete(b.scheds, s.id)
		b.log.Info("schedule ended", "schedule", s.id, "fires", s.fires)
		return
	}
	s.next = next
	b.plan(s)
}

// holdFire makes a fire's stored job pending, as an appended REQUEST is.
func (b *Broker) holdFire(sj *store.Job) {
	if old := b.jobs[sj.MsgID]; old != nil {
		return // held already
	}
	j := b.jobFromStore(sj)
	b.jobs[j.id] = j
	j.q.live++
	b.stats.Acked.Add(1)
	b.enqueue(j, time.Now())
}

// reloadSchedule reads a schedule back from the journal into memory.
func (b *Broker) reloadSchedule(id string) {
	go func() {
		ss, err := b.journal.GetSchedule(id)
		b.post(func() {
			if old := b.scheds[id]; old != nil {
				b.timers.stop(old)
				delete(b.scheds, id)
			}
			if err != nil {
				return // removed
			}
			if s, err := scheduleFromStore(ss); err == nil {
				b.scheds[id] = s
				b.plan(s)
			}
		})
	}()
}

// putSchedule handles a SCHEDULE: the schedule is stored (new, or
// replacing the one of its id), then ACKed, then planned.
func (b *Broker) putSchedule(from peerKey, m *emqp.Schedule) {
	if b.phase != serving {
		b.refuse(from, m.MsgID, emqp.CodeUnavailable, "the broker is shutting down; send again later")
		return
	}
	ss, s, err := b.newSchedule(m.Queue, m.Headers, m.Interval, m.Cron, m.Payload)
	if err != nil {
		b.refuse(from, m.MsgID, emqp.CodeBadRequest, err.Error())
		return
	}
	if old := b.scheds[s.id]; old != nil && old.sig == s.sig {
		b.ack(from, m.MsgID) // the same schedule: it goes on as it was
		return
	}
	b.storeSchedule(ss, s, func(err error) {
		if err != nil {
			code := emqp.CodeUnavailable
			if errors.Is(err, store.ErrTooLarge) {
				code = emqp.CodeTooLarge
			}
			b.refuse(from, m.MsgID, code, "the journal could not store the schedule: "+err.Error())
			return
		}
		b.ack(from, m.MsgID)
	})
}

// newSchedule makes a schedule from a SCHEDULE's parts on the broker's
// clock: in the journal's terms, and as the loop holds it.
func (b *Broker) newSchedule(queue string, h emqp.Headers, interval int, expr string, payload []byte) (*store.Schedule, *schedule, error) {
	ss, err := makeSchedule(queue, h, interval, expr, payload, b.now())
	if err != nil {
		return nil, nil, err
	}
	s, err := scheduleFromStore(ss)
	return ss, s, err
}

// makeSchedule checks a schedule's parts and makes it, due first at now
// (or, with nohaste, at its first due time after now).
func makeSchedule(queue string, h emqp.Headers, interval int, expr string, payload []byte, now time.Time) (*store.Schedule, error) {
	if queue == "" || len(queue) > emqp.MaxQueueLen {
		return nil, fmt.Errorf("queue name must be 1 to %d bytes", emqp.MaxQueueLen)
	}
	tz, _ := h.Get(emqp.HeaderTZ)
	when, err := parseCadence(interval, expr, tz)
	if err != nil {
		return nil, err
	}
	if when.cron != nil && when.cron.Next(now).IsZero() {
		return nil, fmt.Errorf("cron expression %q: no such time in the next five years", expr)
	}
	runs, err := h.RunCount()
	if err != nil {
		return nil, err
	}
	left := -1
	if runs > 0 {
		left = runs
	}
	return &store.Schedule{ID: scheduleID(queue, h, payload), Queue: queue, Headers: h.String(), Payload: payload,
		Every: when.every, Cron: when.expr, Next: when.first(now, h.NoHaste()), Left: left, Created: now}, nil
}

// SameSchedule says whether a and b are the same schedule: the same id,
// and what defines it (queue, headers, cadence, payload) unchanged.
func SameSchedule(a, b *store.Schedule) bool { return a.ID == b.ID && signature(a) == signature(b) }

// storeSchedule writes ss and, once it is stored, holds s in its place.
func (b *Broker) storeSchedule(ss *store.Schedule, s *schedule, done func(error)) {
	b.journal.PutSchedule(ss, func(created bool, err error) {
		b.post(func() {
			if err != nil {
				b.noticeFence(err)
				done(err)
				return
			}
			if old := b.scheds[s.id]; old != nil {
				b.timers.stop(old)
			}
			b.scheds[s.id] = s
			b.plan(s)
			b.log.Info("schedule stored", "schedule", s.id, "queue", s.queue, "next", s.next, "new", created)
			done(nil)
		})
	})
}

// removeSchedule handles an UNSCHEDULE: the schedule its frames name is
// removed (if there is one), then the UNSCHEDULE is ACKed.
func (b *Broker) removeSchedule(from peerKey, m *emqp.Unschedule) {
	id := scheduleID(m.Queue, m.Headers, m.Payload)
	b.dropSchedule(id, func(_ bool, err error) {
		if err != nil {
			b.refuse(from, m.MsgID, emqp.CodeUnavailable, "the journal could not remove the schedule: "+err.Error())
			return
		}
		b.ack(from, m.MsgID)
	})
}

// dropSchedule removes schedule id from the journal, then from memory.
func (b *Broker) dropSchedule(id string, done func(found bool, err error)) {
	b.journal.RemoveSchedule(id, func(found bool, err error) {
		b.post(func() {
			if err == nil {
				if s := b.scheds[id]; s != nil {
					b.timers.stop(s)
					delete(b.scheds, id)
				}
			}
			b.noticeFence(err)
			done(found, err)
		})
	})
}

// pauseSchedule pauses or resumes schedule id. A schedule resumed after
// its due time fires once, as one found late at a start does (unless
// misfire:skip and over misfireGrace late).
func (b *Broker) pauseSchedule(id string, paused bool, done func(error)) {
	b.journal.PauseSchedule(id, paused, func(_ *store.Schedule, err error) {
		b.post(func() {
			if s := b.scheds[id]; err == nil && s != nil {
				s.paused = paused
				s.missed = !paused && b.now().Sub(s.next) > misfireGrace
				b.plan(s)
			}
			b.noticeFence(err)
			done(err)
		})
	})
}
