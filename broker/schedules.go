package broker

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // tz:Area/City works on machines without a zoneinfo database

	"github.com/robfig/cron/v3"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Schedules kept by the broker: the contract (identity, when, exactly
// once, missed fires) is broker/doc.go's "Schedules"; this file carries it
// out. Each schedule is one deadline on the loop; its fire is one journal
// transaction (store.Journal.FireSchedule) before the job joins its queue.

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
	full     bool     // its last fire was skipped: the queue held MaxPending jobs
	sig      [20]byte // of what defines it: the same SCHEDULE again changes nothing
	fires    int
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

// parseCadence reads an interval (seconds, 1 to maxWait) or, for interval
// -1, a cron expression in the time zone tz ("" = UTC, or the
// expression's own CRON_TZ= prefix).
func parseCadence(interval int, expr, tz string) (cadence, error) {
	if interval != emqp.CronInterval {
		if interval < 1 || int64(interval) > int64(maxWait/time.Second) {
			return cadence{}, fmt.Errorf("interval_secs %d: want 1 to %d seconds (100 years), or -1 with a cron expression", interval, int64(maxWait/time.Second))
		}
		return cadence{every: time.Duration(interval) * time.Second}, nil
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return cadence{}, fmt.Errorf("cron expression %q: %v (want 5 fields, minute hour day-of-month month day-of-week, or a descriptor such as @hourly)", expr, err)
	}
	switch sched := sched.(type) {
	case cron.ConstantDelaySchedule:
		if sched.Delay > maxWait {
			return cadence{}, fmt.Errorf("cron expression %q: over 100 years", expr)
		}
	case *cron.SpecSchedule:
		hasTZ := strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=")
		switch {
		case hasTZ && tz != "":
			return cadence{}, fmt.Errorf("cron expression %q and header tz:%s: give the time zone once", expr, tz)
		case !hasTZ && tz != "":
			if sched.Location, err = time.LoadLocation(tz); err != nil {
				return cadence{}, fmt.Errorf("header tz:%s: not a time zone (want Area/City, as Europe/Berlin): %v", tz, err)
			}
		case !hasTZ:
			sched.Location = time.UTC // the parser's default is the machine's zone
		}
	}
	return cadence{cron: sched, expr: expr}, nil
}

// after is the first due time after now, following due: an interval keeps
// its phase, a cron schedule its times.
func (c cadence) after(due, now time.Time) time.Time {
	if c.cron == nil {
		if due.After(now) {
			return due
		}
		return due.Add((now.Sub(due)/c.every + 1) * c.every)
	}
	next := c.cronNext(now)
	// The hour that the end of daylight saving time repeats: a schedule
	// that names its hours does not fire again at a local time it has
	// fired at, as in classic cron (one every hour fires every hour).
	if spec, ok := c.cron.(*cron.SpecSchedule); ok && !everyHour(spec) && !next.IsZero() && !due.IsZero() &&
		!wallClock(next, spec.Location).After(wallClock(due, spec.Location)) {
		next = c.cronNext(next)
	}
	return next
}

// cronNext is the cron schedule's first time after t. A local time that
// the start of daylight saving time skips (robfig/cron passes over it)
// comes at the same time on the clock of before the change: 02:30 skipped
// when 02:00 became 03:00 is 03:30.
func (c cadence) cronNext(t time.Time) time.Time {
	next := c.cron.Next(t)
	spec, ok := c.cron.(*cron.SpecSchedule)
	if !ok || spec.Location == time.UTC {
		return next
	}
	_, offset := t.In(spec.Location).Zone()
	before := *spec
	before.Location = time.FixedZone("", offset)
	alt := before.Next(t)
	if !alt.IsZero() && (next.IsZero() || alt.Before(next)) && !exists(alt.In(before.Location), spec.Location) {
		return alt
	}
	return next
}

// everyHour: the expression's hour field is every hour.
func everyHour(spec *cron.SpecSchedule) bool {
	const all = 1<<24 - 1
	return spec.Hour&all == all
}

// wallClock is t as the clock on the wall in loc reads it, in UTC's terms
// (so that two readings compare as the wall clock's).
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
}

// exists says whether the wall clock of w (date, hour, minute) is a time
// in loc.
func exists(w time.Time, loc *time.Location) bool {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), 0, 0, loc)
	return t.Hour() == w.Hour() && t.Minute() == w.Minute()
}

// first is a new schedule's first due time: now, or with nohaste the
// next one after now.
func (c cadence) first(now time.Time, nohaste bool) time.Time {
	switch {
	case !nohaste:
		return now
	case c.cron != nil:
		return c.cronNext(now)
	}
	return now.Add(c.every)
}

// fireID is the msgid of a schedule's fire: the same for the same due
// time, whoever makes it. The due time counts in nanoseconds, so that a
// schedule replaced within a second (its first fire due at once) does not
// name its fire as the old one's.
func fireID(id string, due time.Time) string {
	sum := sha1.Sum([]byte(id))
	return "schedule-" + hex.EncodeToString(sum[:8]) + "-" + strconv.FormatInt(due.UnixNano(), 10)
}

// now is the time on the schedules' clock (Options.Now).
func (b *Broker) now() time.Time {
	if b.opts.Now != nil {
		return b.opts.Now().Round(0)
	}
	return time.Now().Round(0) // the wall clock's reading: due times are wall-clock times
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
		skipLate: misfire == "skip", fires: ss.Fires, sig: signature(ss)}, nil
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
		// An "at once" first fire still to be made (the schedule was
		// added to a stopped broker's journal) is not a missed one.
		atOnce := ss.Fires == 0 && ss.Next.Equal(ss.Created)
		s.missed = now.Sub(s.next) > misfireGrace && !atOnce
		b.scheds[s.id] = s
		b.plan(s)
		n++
		return nil
	})
	return n, err
}

// scheduleDue: s's due time has come. The journal makes the fire and
// moves s on; s waits meanwhile. No job is made for a due time missed
// under misfire:skip, or while the schedule's queue holds MaxPending jobs
// (the schedule goes on; both are counted).
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
	q := b.queues[s.queue]
	full := b.opts.MaxPending > 0 && q != nil && q.live >= b.opts.MaxPending
	if full {
		msgid = ""
	}
	if full != s.full {
		s.full = full
		if full {
			b.log.Warn("a schedule's queue holds max-pending jobs: its fires make no job until it holds fewer", "schedule", s.id, "queue", s.queue, "jobs", q.live)
		} else {
			b.log.Info("a schedule's queue has room again: its fires make jobs", "schedule", s.id, "queue", s.queue)
		}
	}
	s.firing = true
	b.journal.FireSchedule(s.id, due, next, msgid, func(sj *store.Job, dup bool, err error) {
		b.fired(s, due, next, sj, dup, err)
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
		// Made already (by another broker), or the schedule was paused
		// or changed meanwhile: take the journal's word for it.
		b.reloadSchedule(s)
		return
	case errors.Is(err, store.ErrFenced):
		b.fence(err)
		return
	case errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrInvalidJob):
		// No fire of it can be stored (a journal limit lower than when
		// it was added): hold it for an operator rather than retry.
		b.log.Error("a schedule's fire cannot be stored; the schedule is paused: change or remove it", "schedule", s.id, "due", due, "err", err)
		b.pauseSchedule(s.id, true, func(error) {})
		return
	case err != nil:
		b.log.Error("journal could not make a schedule's fire; it is tried again", "schedule", s.id, "due", due, "err", err)
		if !s.paused {
			b.timers.set(s, b.after(time.Now(), readRetry))
		}
		return
	}
	s.missed = false
	if sj == nil {
		b.stats.FiresSkipped.Add(1)
	} else {
		s.fires++
		if s.left > 0 {
			s.left--
		}
		b.stats.SchedulesFired.Add(1)
		b.observe.Fired(b.now().Sub(due))
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
	if old := b.jobs.get(sj.MsgID); old != nil {
		return // held already
	}
	j := b.jobFromStore(sj, nil)
	b.jobs.set(j.id, j)
	b.adopt(j)
	b.stats.Acked.Add(1)
	j.q.acked++
	b.enqueue(j, time.Now())
}

// reloadSchedule reads s back from the journal and holds what it says in
// s's place, unless s was replaced or removed meanwhile. A schedule write
// that lands during the read makes it read again.
func (b *Broker) reloadSchedule(s *schedule) {
	b.timers.stop(s)
	gen := b.schedGen
	go func() {
		ss, err := b.journal.GetSchedule(s.id)
		b.post(func() {
			switch {
			case b.scheds[s.id] != s:
				return // replaced or removed: that holds
			case b.schedGen != gen:
				b.reloadSchedule(s)
				return
			case errors.Is(err, store.ErrNotFound):
				delete(b.scheds, s.id)
				return
			case err != nil:
				b.log.Error("journal could not read a schedule; it is tried again", "schedule", s.id, "err", err)
				b.timers.set(s, b.after(time.Now(), readRetry)) // its fire finds out again
				return
			}
			fresh, err := scheduleFromStore(ss)
			if err != nil {
				b.log.Error("a stored schedule cannot be read; it is left as it is", "schedule", s.id, "err", err)
				delete(b.scheds, s.id)
				return
			}
			b.scheds[s.id] = fresh
			b.plan(fresh)
		})
	}()
}

// putSchedule handles a SCHEDULE: the schedule is stored (new, or
// replacing the one of its id), then ACKed, then planned.
func (b *Broker) putSchedule(from peerKey, m *emqp.Schedule) {
	b.keepSchedule(m.Queue, m.Headers, m.Interval, m.Cron, m.Payload, func(_ string, _ *store.Schedule, err error) {
		switch {
		case err == nil:
			b.ack(from, m.MsgID)
		case errors.Is(err, store.ErrInvalidJob):
			b.refuse(from, m.MsgID, emqp.CodeBadRequest, err.Error())
		case errors.Is(err, store.ErrTooLarge):
			b.refuse(from, m.MsgID, emqp.CodeTooLarge, err.Error())
		case errors.Is(err, ErrDraining):
			b.refuse(from, m.MsgID, emqp.CodeUnavailable, err.Error())
		default:
			b.refuse(from, m.MsgID, emqp.CodeUnavailable, "the journal could not store the schedule: "+err.Error())
		}
	})
}

// ErrDraining refuses new work while the broker stops.
var ErrDraining = errors.New("the broker is shutting down; send again later")

// keepSchedule makes the schedule that a SCHEDULE's parts describe and
// stores it, unless it is the one kept already (then it goes on as it
// was). done gets its id and what was written (nil: nothing), or the
// refusal: ErrBadSchedule saying what is wrong, ErrDraining, or the
// journal's.
func (b *Broker) keepSchedule(queue string, h emqp.Headers, interval int, expr string, payload []byte,
	done func(id string, stored *store.Schedule, err error)) {
	if b.phase != serving {
		done("", nil, ErrDraining)
		return
	}
	ss, s, err := b.newSchedule(queue, h, interval, expr, payload)
	switch {
	case err != nil:
		done("", nil, fmt.Errorf("%w: %v", store.ErrBadSchedule, err))
	case b.kept(s):
		done(s.id, nil, nil)
	default:
		b.storeSchedule(ss, s, func(err error) { done(s.id, ss, err) })
	}
}

// kept says whether s is the schedule held under its id, with no write of
// that id under way (the last one to land wins).
func (b *Broker) kept(s *schedule) bool {
	old := b.scheds[s.id]
	return old != nil && old.sig == s.sig && b.schedWriting[s.id] == 0
}

// newSchedule makes a schedule from a SCHEDULE's parts on the broker's
// clock: in the journal's terms, and as the loop holds it.
func (b *Broker) newSchedule(queue string, h emqp.Headers, interval int, expr string, payload []byte) (*store.Schedule, *schedule, error) {
	ss, err := MakeSchedule(queue, h, interval, expr, payload, b.now())
	if err != nil {
		return nil, nil, err
	}
	s, err := scheduleFromStore(ss)
	return ss, s, err
}

// makeSchedule checks a schedule's parts and makes it, due first at now
// (or, with nohaste, at its first due time after now).
func MakeSchedule(queue string, h emqp.Headers, interval int, expr string, payload []byte, now time.Time) (*store.Schedule, error) {
	if queue == "" || len(queue) > emqp.MaxQueueLen {
		return nil, fmt.Errorf("queue name must be 1 to %d bytes", emqp.MaxQueueLen)
	}
	// Its fires are jobs: their headers are checked as a REQUEST's.
	if _, err := newJob("", nil, h); err != nil {
		return nil, err
	}
	switch wf, err := h.Workflow(); {
	case err != nil:
		return nil, err
	case wf.Waits() || wf.Batch != "":
		return nil, fmt.Errorf("headers %s, %s and %s: a schedule's jobs neither wait for other jobs nor join a batch", emqp.HeaderAfter, emqp.HeaderAfterBatch, emqp.HeaderBatch)
	}
	if _, err := h.Delay(); err != nil {
		return nil, err
	}
	id := scheduleID(queue, h, payload)
	if len(id) > store.MaxIDLen {
		return nil, fmt.Errorf("header %s: a schedule id is at most %d bytes, got %d", emqp.HeaderScheduleID, store.MaxIDLen, len(id))
	}
	tz, _ := h.Get(emqp.HeaderTZ)
	when, err := parseCadence(interval, expr, tz)
	if err != nil {
		return nil, err
	}
	if when.cron != nil && when.cronNext(now).IsZero() {
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
	return &store.Schedule{ID: id, Queue: queue, Headers: h.String(), Payload: payload,
		Every: when.every, Cron: when.expr, Next: when.first(now, h.NoHaste()), Left: left, Created: now}, nil
}

// SameSchedule says whether a and b are the same schedule: the same id,
// and what defines it (queue, headers, cadence, payload) unchanged.
func SameSchedule(a, b *store.Schedule) bool { return a.ID == b.ID && signature(a) == signature(b) }

// storeSchedule writes ss and, once it is stored, holds s in its place.
func (b *Broker) storeSchedule(ss *store.Schedule, s *schedule, done func(error)) {
	b.writingSchedule(s.id, 1)
	b.journal.PutSchedule(ss, func(created bool, err error) {
		b.writingSchedule(s.id, -1)
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
	b.writingSchedule(id, 1)
	b.journal.RemoveSchedule(id, func(found bool, err error) {
		b.writingSchedule(id, -1)
		if err == nil {
			if s := b.scheds[id]; s != nil {
				b.timers.stop(s)
				delete(b.scheds, id)
			}
		}
		b.noticeFence(err)
		done(found, err)
	})
}

// pauseSchedule pauses or resumes schedule id. A schedule resumed after
// its due time fires once, as one found late at a start does (unless
// misfire:skip and over misfireGrace late).
func (b *Broker) pauseSchedule(id string, paused bool, done func(error)) {
	b.writingSchedule(id, 1)
	b.journal.PauseSchedule(id, paused, func(_ *store.Schedule, err error) {
		b.writingSchedule(id, -1)
		if s := b.scheds[id]; err == nil && s != nil {
			s.paused = paused
			s.missed = !paused && b.now().Sub(s.next) > misfireGrace
			b.plan(s)
		}
		b.noticeFence(err)
		done(err)
	})
}

// writingSchedule counts the writes of schedule id under way: +1 when one
// starts, -1 when it lands. Each landing moves schedGen, which tells a
// read begun before it (reloadSchedule) that it may be stale.
func (b *Broker) writingSchedule(id string, delta int) {
	if n := b.schedWriting[id] + delta; n > 0 {
		b.schedWriting[id] = n
	} else {
		delete(b.schedWriting, id)
	}
	if delta < 0 {
		b.schedGen++
	}
}
