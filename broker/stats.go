package broker

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventmq/emq/emqp"
)

// Stats are the broker's counters since it started. They are safe to read
// from any goroutine.
type Stats struct {
	Received     atomic.Int64 // REQUESTs, including refused ones
	Acked        atomic.Int64 // jobs stored and ACKed, once each
	Duplicates   atomic.Int64 // REQUESTs for a msgid the broker holds
	Dispatched   atomic.Int64
	Replied      atomic.Int64
	Failed       atomic.Int64 // FAILs from workers
	Retried      atomic.Int64 // attempts that led to another try
	TimedOut     atomic.Int64
	DeadLettered atomic.Int64
	Ignored      atomic.Int64 // late or foreign REPLY/FAIL, stray ACK/ERROR

	SchedulesForwarded atomic.Int64 // SCHEDULEs and UNSCHEDULEs passed to schedulers

	errMu  sync.Mutex
	errors map[string]int64 // ERRORs sent, by code
}

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

// ErrorCodes are the codes an ERROR can carry.
var ErrorCodes = []string{
	emqp.CodeBadRequest, emqp.CodeUnsupportedVersion, emqp.CodeUnknownCommand,
	emqp.CodeTooLarge, emqp.CodeQueueFull, emqp.CodeUnavailable,
}

// logLimiter keeps a flood of bad messages from flooding the log: at most
// logBurst lines a second, then one line with the count of the rest.
type logLimiter struct {
	second     time.Time
	n, dropped int
}

const logBurst = 50

func (l *logLimiter) log(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	if now.Sub(l.second) >= time.Second {
		if l.dropped > 0 {
			log.Warn("protocol errors not logged in the last second", "count", l.dropped)
		}
		l.second, l.n, l.dropped = now, 0, 0
	}
	if l.n >= logBurst {
		l.dropped++
		return
	}
	l.n++
	log.Warn(msg, args...)
}
