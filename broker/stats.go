package broker

import (
	"sync"
	"sync/atomic"

	"github.com/eventmq/emq/emqp"
)

// Stats are the broker's counters since it started. They are safe to read
// from any goroutine. Counters lists them with their names, in the order
// every view shows them.
type Stats struct {
	Received     atomic.Int64
	Acked        atomic.Int64
	Duplicates   atomic.Int64
	PassedOver   atomic.Int64 // times a tenant or a job was passed over for a limit
	Overdue      atomic.Int64 // jobs held past OverdueAfter
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

// Counter is one of the broker's counters, defined once for every view:
// its name in the stats API (/api/v1/stats) and emq stats, its name in
// /metrics, and what it counts.
type Counter struct {
	Name   string
	Metric string
	Help   string
	field  func(*Stats) *atomic.Int64
}

// Value reads the counter in s.
func (c Counter) Value(s *Stats) int64 { return c.field(s).Load() }

// Counters are every counter of Stats, in the order they are shown.
var Counters = []Counter{
	{"received", "emq_jobs_received_total", "REQUESTs received, refused ones included.", func(s *Stats) *atomic.Int64 { return &s.Received }},
	{"acked", "emq_jobs_acked_total", "Jobs stored and ACKed, once each.", func(s *Stats) *atomic.Int64 { return &s.Acked }},
	{"duplicates", "emq_jobs_duplicate_total", "REQUESTs for a msgid the broker holds or has stored (ACKed again, not stored twice).", func(s *Stats) *atomic.Int64 { return &s.Duplicates }},
	{"passed_over", "emq_jobs_passed_over_total", "Times dispatch passed over a tenant at its limit (concurrency or rate) or a job whose named limiter had no room; they waited, the others ran.", func(s *Stats) *atomic.Int64 { return &s.PassedOver }},
	{"overdue", "emq_jobs_overdue_total", "Jobs without a timeout held by a worker past overdue-after (each once a delivery); see emq jobs why.", func(s *Stats) *atomic.Int64 { return &s.Overdue }},
	{"dispatched", "emq_jobs_dispatched_total", "Jobs sent to a worker.", func(s *Stats) *atomic.Int64 { return &s.Dispatched }},
	{"replied", "emq_jobs_replied_total", "Jobs completed by their worker's REPLY.", func(s *Stats) *atomic.Int64 { return &s.Replied }},
	{"failed", "emq_jobs_failed_total", "FAILs from workers.", func(s *Stats) *atomic.Int64 { return &s.Failed }},
	{"retried", "emq_jobs_retried_total", "Attempts after which a job was tried again.", func(s *Stats) *atomic.Int64 { return &s.Retried }},
	{"timed_out", "emq_jobs_timed_out_total", "Deliveries that passed the job's timeout.", func(s *Stats) *atomic.Int64 { return &s.TimedOut }},
	{"dead_lettered", "emq_jobs_dead_lettered_total", "Jobs moved to the dead letters.", func(s *Stats) *atomic.Int64 { return &s.DeadLettered }},
	{"cancelled", "emq_jobs_cancelled_total", "Jobs cancelled (emq jobs cancel, the API, a client's CANCEL).", func(s *Stats) *atomic.Int64 { return &s.Cancelled }},
	{"progress", "emq_job_progress_total", "PROGRESS reports taken from workers.", func(s *Stats) *atomic.Int64 { return &s.Progress }},
	{"ignored", "emq_messages_ignored_total", "Late or foreign REPLYs and FAILs, stray ACKs and ERRORs.", func(s *Stats) *atomic.Int64 { return &s.Ignored }},
	{"schedules_forwarded", "emq_schedules_forwarded_total", "SCHEDULEs and UNSCHEDULEs passed to schedulers (forward-schedules).", func(s *Stats) *atomic.Int64 { return &s.SchedulesForwarded }},
	{"schedules_fired", "emq_schedule_fires_total", "Jobs made by schedules the broker keeps.", func(s *Stats) *atomic.Int64 { return &s.SchedulesFired }},
	{"event_listeners_dropped", "emq_event_listeners_dropped_total", "Event stream listeners dropped for falling behind (event-buffer).", func(s *Stats) *atomic.Int64 { return &s.ListenersDropped }},
	{"journal_damaged", "emq_journal_damaged_total", "Stored values found failing their checksums, each moved aside (a job to the dead letters, the rest to emq journal check's list).", func(s *Stats) *atomic.Int64 { return &s.JournalDamaged }},
	{"schedule_fires_skipped", "emq_schedule_fires_skipped_total", "Due times of kept schedules that made no job: missed under misfire:skip, or their queue held max-pending jobs.", func(s *Stats) *atomic.Int64 { return &s.FiresSkipped }},
}

// ErrorsName is the name of the ERROR counts by code: "protocol_errors"
// in the stats API and emq stats, emq_protocol_errors_total{code} in
// /metrics.
const ErrorsName = "protocol_errors"

func (s *Stats) countError(code string) {
	s.errMu.Lock()
	if s.errors == nil {
		s.errors = make(map[string]int64)
	}
	s.errors[code]++
	s.errMu.Unlock()
}

// Errors returns how many ERRORs were sent with code.
func (s *Stats) Errors(code string) int64 {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.errors[code]
}

// ErrorCodes are the codes an ERROR can carry, in the order they are
// shown.
var ErrorCodes = []string{
	emqp.CodeBadRequest, emqp.CodeUnsupportedVersion, emqp.CodeUnknownCommand,
	emqp.CodeTooLarge, emqp.CodeQueueFull, emqp.CodeUnavailable, emqp.CodeForbidden,
	emqp.CodeDuplicate, emqp.CodeNotFound, emqp.CodeConflict, emqp.CodeMoved,
}

// logBurst is how many lines a second each kind of refusal may log
// (internal/lograte); the rest are counted in one line.
const logBurst = 50
