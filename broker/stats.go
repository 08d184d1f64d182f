package broker

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/eventmq/emq/emqp"
)

// counts are the broker's counters, counted by the loop (and a few
// other goroutines) and read by Stats. Nothing outside the package sees
// them: Stats hands out a copy.
type counts struct {
	Received     atomic.Int64
	Acked        atomic.Int64
	Duplicates   atomic.Int64
	PassedOver   atomic.Int64
	Overdue      atomic.Int64
	Dispatched   atomic.Int64
	Replied      atomic.Int64
	Failed       atomic.Int64
	Retried      atomic.Int64
	TimedOut     atomic.Int64
	DeadLettered atomic.Int64
	Ignored      atomic.Int64
	Cancelled    atomic.Int64
	Progress     atomic.Int64

	SchedulesForwarded atomic.Int64
	SchedulesFired     atomic.Int64
	FiresSkipped       atomic.Int64

	ListenersDropped atomic.Int64
	JournalDamaged   atomic.Int64

	errMu  sync.Mutex
	errors map[string]int64 // ERRORs sent, by code
}

func (c *counts) countError(code string) {
	c.errMu.Lock()
	if c.errors == nil {
		c.errors = make(map[string]int64)
	}
	c.errors[code]++
	c.errMu.Unlock()
}

// snapshot reads every counter.
func (c *counts) snapshot() Stats {
	s := Stats{
		Received:           c.Received.Load(),
		Acked:              c.Acked.Load(),
		Duplicates:         c.Duplicates.Load(),
		PassedOver:         c.PassedOver.Load(),
		Overdue:            c.Overdue.Load(),
		Dispatched:         c.Dispatched.Load(),
		Replied:            c.Replied.Load(),
		Failed:             c.Failed.Load(),
		Retried:            c.Retried.Load(),
		TimedOut:           c.TimedOut.Load(),
		DeadLettered:       c.DeadLettered.Load(),
		Ignored:            c.Ignored.Load(),
		Cancelled:          c.Cancelled.Load(),
		Progress:           c.Progress.Load(),
		SchedulesForwarded: c.SchedulesForwarded.Load(),
		SchedulesFired:     c.SchedulesFired.Load(),
		FiresSkipped:       c.FiresSkipped.Load(),
		ListenersDropped:   c.ListenersDropped.Load(),
		JournalDamaged:     c.JournalDamaged.Load(),
	}
	c.errMu.Lock()
	s.errors = maps.Clone(c.errors)
	c.errMu.Unlock()
	return s
}

// Stats are the broker's counters since it started, as Broker.Stats read
// them: a copy, each counter read at once (not all at one instant).
type Stats struct {
	Received     int64
	Acked        int64
	Duplicates   int64
	PassedOver   int64 // times a tenant or a job was passed over for a limit
	Overdue      int64 // jobs held past OverdueAfter
	Dispatched   int64
	Replied      int64
	Failed       int64
	Retried      int64
	TimedOut     int64
	DeadLettered int64
	Ignored      int64
	Cancelled    int64
	Progress     int64

	SchedulesForwarded int64
	SchedulesFired     int64
	FiresSkipped       int64

	ListenersDropped int64
	JournalDamaged   int64

	errors map[string]int64 // ERRORs sent, by code (the copy's own)
}

// Errors returns how many ERRORs were sent with code.
func (s Stats) Errors(code string) int64 { return s.errors[code] }

// Counter is one of the broker's counters as every view shows it: its
// name in the stats API (/api/v1/stats) and emq stats, what it counts,
// and its value. Package admin names its metric.
type Counter struct {
	Name  string
	Help  string
	Value int64
}

// Counters are s's counters, in the order every view shows them.
func (s Stats) Counters() []Counter {
	return []Counter{
		{"received", "REQUESTs received, refused ones included.", s.Received},
		{"acked", "Jobs stored and ACKed, once each.", s.Acked},
		{"duplicates", "REQUESTs for a msgid the broker holds or has stored (ACKed again, not stored twice).", s.Duplicates},
		{"passed_over", "Times dispatch passed over a tenant at its limit (concurrency or rate) or a job whose named limiter had no room; they waited, the others ran.", s.PassedOver},
		{"overdue", "Jobs without a timeout held by a worker past overdue-after (each once a delivery); see emq jobs why.", s.Overdue},
		{"dispatched", "Jobs sent to a worker.", s.Dispatched},
		{"replied", "Jobs completed by their worker's REPLY.", s.Replied},
		{"failed", "FAILs from workers.", s.Failed},
		{"retried", "Attempts after which a job was tried again.", s.Retried},
		{"timed_out", "Deliveries that passed the job's timeout.", s.TimedOut},
		{"dead_lettered", "Jobs moved to the dead letters.", s.DeadLettered},
		{"cancelled", "Jobs cancelled (emq jobs cancel, the API, a client's CANCEL).", s.Cancelled},
		{"progress", "PROGRESS reports taken from workers.", s.Progress},
		{"ignored", "Late or foreign REPLYs and FAILs, stray ACKs and ERRORs.", s.Ignored},
		{"schedules_forwarded", "SCHEDULEs and UNSCHEDULEs passed to schedulers (forward-schedules).", s.SchedulesForwarded},
		{"schedules_fired", "Jobs made by schedules the broker keeps.", s.SchedulesFired},
		{"event_listeners_dropped", "Event stream listeners dropped for falling behind (event-buffer).", s.ListenersDropped},
		{"journal_damaged", "Stored values found failing their checksums, each moved aside (a job to the dead letters, the rest to emq journal check's list).", s.JournalDamaged},
		{"schedule_fires_skipped", "Due times of kept schedules that made no job: missed under misfire:skip, or their queue held max-pending jobs.", s.FiresSkipped},
	}
}

// ErrorCounts are s's ERROR counts, one a code of ErrorCodes, in that
// order.
func (s Stats) ErrorCounts() []Counter {
	codes := ErrorCodes()
	cs := make([]Counter, len(codes))
	for i, code := range codes {
		cs[i] = Counter{Name: code, Value: s.errors[code]}
	}
	return cs
}

// ErrorsName is the name of the ERROR counts by code in the stats API
// and emq stats ("protocol_errors").
const ErrorsName = "protocol_errors"

// ErrorCodes returns the codes an ERROR can carry, in the order they are
// shown.
func ErrorCodes() []string {
	return []string{
		emqp.CodeBadRequest, emqp.CodeUnsupportedVersion, emqp.CodeUnknownCommand,
		emqp.CodeTooLarge, emqp.CodeQueueFull, emqp.CodeUnavailable, emqp.CodeForbidden,
		emqp.CodeDuplicate, emqp.CodeNotFound, emqp.CodeConflict, emqp.CodeMoved,
	}
}

// logBurst is how many lines a second each kind of refusal may log
// (internal/lograte); the rest are counted in one line.
const logBurst = 50
