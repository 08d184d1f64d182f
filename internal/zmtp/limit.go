package zmtp

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/eventmq/emq/internal/lograte"
)

// ConnLimit bounds the connections of the endpoints that share it: in all
// (Max) and from one IP address (PerIP), handshakes included; 0 = no
// bound. A connection beyond them is closed as soon as it is accepted,
// before any byte is read. Refusals and failed handshakes are counted,
// and logged at most a few lines a second. A nil *ConnLimit bounds and
// counts nothing; what it is told is still logged, within the rate.
type ConnLimit struct {
	max, perIP int

	mu    sync.Mutex
	total int
	byIP  map[string]int

	refused, failed atomic.Int64
	logs            *lograte.Limiter
}

// NewConnLimit makes a limit of max connections in all and perIP from one
// address (0 = no bound).
func NewConnLimit(max, perIP int) *ConnLimit {
	return &ConnLimit{max: max, perIP: perIP, byIP: make(map[string]int), logs: newLogRate()}
}

// admit takes a place for a connection from addr: release gives it back
// (once). why says which bound refused it ("" = admitted).
func (l *ConnLimit) admit(addr net.Addr) (release func(), why string) {
	if l == nil {
		return func() {}, ""
	}
	ip := addr.String()
	if ta, ok := addr.(*net.TCPAddr); ok {
		ip = ta.IP.String()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.total >= l.max:
		return nil, "max-connections"
	case l.perIP > 0 && l.byIP[ip] >= l.perIP:
		return nil, "max-connections-per-ip"
	}
	l.total++
	l.byIP[ip]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.total--
			if l.byIP[ip]--; l.byIP[ip] == 0 {
				delete(l.byIP, ip)
			}
			l.mu.Unlock()
		})
	}, ""
}

// Connections is how many connections hold a place now.
func (l *ConnLimit) Connections() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Refused is how many connections a bound refused.
func (l *ConnLimit) Refused() int64 {
	if l == nil {
		return 0
	}
	return l.refused.Load()
}

// HandshakesFailed is how many connections ended in their handshake:
// timed out, closed, or not speaking ZMTP.
func (l *ConnLimit) HandshakesFailed() int64 {
	if l == nil {
		return 0
	}
	return l.failed.Load()
}

// logBurst is how many refused connections and failed handshakes are
// logged a second; the rest are counted in one line.
const logBurst = 5

func newLogRate() *lograte.Limiter {
	return lograte.New(logBurst, "zmtp: refused connections and failed handshakes not logged in the last second")
}

// unlimited is the log rate of a nil *ConnLimit: it counts nothing,
// but what it is told is still logged, within the rate.
var unlimited = newLogRate()

func (l *ConnLimit) rate() *lograte.Limiter {
	if l == nil {
		return unlimited
	}
	return l.logs
}

// noteRefused counts a refused connection and logs it, within the rate.
func (l *ConnLimit) noteRefused(log *slog.Logger, nc net.Conn, why string) {
	if l != nil {
		l.refused.Add(1)
	}
	if l.rate().Allow(log) {
		log.Warn("zmtp: connection refused: "+why+" reached", "remote", nc.RemoteAddr().String(),
			"connections", l.Connections())
	}
}

// noteFailed counts a failed handshake and logs it, within the rate; a
// peer that closed at once (EOF) is counted but not logged.
func (l *ConnLimit) noteFailed(log *slog.Logger, nc net.Conn, err error) {
	if l != nil {
		l.failed.Add(1)
	}
	if errors.Is(err, io.EOF) {
		return
	}
	if l.rate().Allow(log) {
		log.Info("zmtp: handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
	}
}
