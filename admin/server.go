package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/internal/addr"
	"github.com/eventmq/emq/internal/lograte"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/shards"
)

// Options configure the admin listener. Start from DefaultOptions.
type Options struct {
	Addr  string // HTTP host:port; "" = none
	Token string // required as a Bearer token when set; needed for a non-loopback Addr
	// ReadToken, when set, is a second Bearer token that may read
	// everything the admin API shows and change nothing (403): for
	// dashboards and monitoring.
	ReadToken string
	// ProducerToken, when set, is a Bearer token that may send jobs (POST
	// /api/v1/queues/{queue}/jobs) and read their results (GET
	// /api/v1/jobs/{msgid}/result), and nothing else (403): for the
	// programs that enqueue over HTTP.
	ProducerToken string
	// ShowPayloads says who besides the full admin token sees payloads
	// and results (payloads.go): nil, with no token set, every caller
	// (of a loopback listener: the admin) and not the read-only token;
	// true both; false neither.
	ShowPayloads *bool
	// KeepResult is how long a job sent over HTTP keeps its result for
	// its sender (header keep-result) when it names no time itself; 0:
	// as the broker's retain-done says.
	KeepResult time.Duration
	// MaxResultWaits bounds the result requests that wait at once
	// (?wait=); more get 503.
	MaxResultWaits int
	// TLSCert and TLSKey (PEM files, both or neither) make the listener
	// serve HTTPS.
	TLSCert, TLSKey string
	// AllowedHosts are names, besides loopback and the listener's own
	// address, that requests may give as their Host (a name the admin API
	// is reached by, through DNS or a proxy). Others get 421.
	AllowedHosts []string
	// AllowedOrigins are origins (scheme://host[:port]), besides the
	// listener's own, whose pages may change things through the admin API
	// (a proxy that serves it under another name).
	AllowedOrigins []string
	// MaxStreams is how many overview streams may run at once (the
	// broker's MaxEventListeners bounds the event streams).
	MaxStreams int
	// MaxBodyBytes bounds a request's body (a schedule's payload comes in
	// one, base64).
	MaxBodyBytes int64

	// Group, if set, says what this broker is in its replicated group: the
	// stats API and the dashboard show it, and with no broker to serve
	// (Serve(nil)) the listener answers as a standby. Collectors are
	// added to /metrics.
	Group      func() GroupInfo
	Collectors []prometheus.Collector
	// Shards, if set, says where queues are served when the broker is one
	// shard of several (/api/v1/shards).
	Shards func(context.Context) (shards.Info, error)
	// Ready, if set, is asked too by /readyz while a broker is served: an
	// error makes it 503 with the error's text (a group's leader that has
	// not run for a while: its lease may have ended meanwhile).
	Ready func() error
	// Shutdown, if set, stops the broker gracefully (as SIGTERM): EventMQ's
	// emq-cli asks it with DISCONNECT (emqcli.go).
	Shutdown func()

	Logger *slog.Logger // nil = slog.Default()
}

// DefaultOptions are DESIGN.md's defaults.
func DefaultOptions() Options {
	return Options{Addr: "127.0.0.1:47293", MaxStreams: 32, MaxBodyBytes: 512 << 20, KeepResult: time.Hour, MaxResultWaits: 1024}
}

// Validate names the first bad field, as its flag.
func (o Options) Validate() error {
	if o.Addr != "" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			return fmt.Errorf("admin: %q is not host:port: %w", o.Addr, err)
		}
		if !addr.Loopback(o.Addr) && o.Token == "" && o.ReadToken == "" && o.ProducerToken == "" {
			return fmt.Errorf("admin: %s is not a loopback address; set admin-token so that requests need it", o.Addr)
		}
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return fmt.Errorf("admin-tls-cert and admin-tls-key go together: set both, or neither")
	}
	if o.Token != "" && o.Token == o.ReadToken {
		return fmt.Errorf("admin-read-token: the same as admin-token; a read-only token must differ")
	}
	if o.ProducerToken != "" && (o.ProducerToken == o.Token || o.ProducerToken == o.ReadToken) {
		return fmt.Errorf("admin-producer-token: the same as admin-token or admin-read-token; a producer token must differ")
	}
	if o.KeepResult < 0 || o.KeepResult > MaxKeepResult {
		return fmt.Errorf("admin-keep-result: %v; want 0 to %v", o.KeepResult, MaxKeepResult)
	}
	if o.MaxResultWaits < 0 {
		return fmt.Errorf("admin-max-result-waits: must be 0 or more, not %d", o.MaxResultWaits)
	}
	for _, h := range o.AllowedHosts {
		if h == "" || net.ParseIP(strings.Trim(h, "[]")) == nil && strings.ContainsAny(h, "/: ") {
			return fmt.Errorf("admin-allowed-hosts: %q is not a host name (no scheme, port or path)", h)
		}
	}
	cop := http.NewCrossOriginProtection()
	for _, origin := range o.AllowedOrigins {
		if err := cop.AddTrustedOrigin(origin); err != nil {
			return fmt.Errorf("admin-allowed-origins: %q: want scheme://host[:port]: %w", origin, err)
		}
	}
	if o.MaxStreams < 0 || o.MaxBodyBytes < 1024 {
		return fmt.Errorf("admin: MaxStreams must be 0 or more and MaxBodyBytes at least 1 KiB")
	}
	return nil
}

// Server is the admin listener: the HTTP API (routes.go), its guard
// (guard.go), the dashboard (dashboard.go) and /metrics (metrics.go). It
// serves one broker's API at a time, or none: Serve says which, and may
// be called again (a group's leader changes; a standby serves none).
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *Metrics
	target  atomic.Pointer[target] // nil: no broker to serve

	sessions  sessions // the dashboard's logins (dashboard.go)
	overviews overviewCache
	streams   atomic.Int64 // overview streams open
	waits     atomic.Int64 // result requests waiting (jobs.go)
	loginLog  *lograte.Limiter
	readLog   *lograte.Limiter // payloads read (payloads.go)

	srv    *http.Server
	cli    *zmtp.Router // emq-cli's eMQP on the same port (emqcli.go)
	cliLog *lograte.Limiter
	addr   string
}

// target is a broker and its API.
type target struct {
	b   *broker.Broker
	api API
}

// New checks opts and makes a Server; Start binds it.
func New(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, log: opts.Logger,
		loginLog: lograte.New(logBurst, "dashboard logins refused and not logged in the last second"),
		readLog:  lograte.New(logBurst, "payload reads not logged in the last second (they are events: emq tail)"),
		cliLog:   lograte.New(logBurst, "emq-cli messages refused and not logged in the last second")}
	s.metrics = newMetrics(s)
	return s, nil
}

// logBurst is how many lines a second each kind of refusal may log.
const logBurst = 50

// Register adds collectors to /metrics (a group's, made after the
// server).
func (s *Server) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := s.metrics.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Observer is what the brokers this server serves should be given as
// broker.Options.Observer: it feeds /metrics.
func (s *Server) Observer() broker.Observer { return s.metrics }

// Serve makes the server answer with b's API from now on; nil: with no
// broker's (a standby of a group, or a broker that stopped).
func (s *Server) Serve(b *broker.Broker) {
	if b == nil {
		s.target.Store(nil)
		return
	}
	s.target.Store(&target{b: b, api: NewLive(b, s.opts.Group)})
}

// current is the broker served now, nil if none.
func (s *Server) current() *target { return s.target.Load() }

// Start binds the address and serves in the background, over TLS when
// there is a certificate.
func (s *Server) Start() error {
	if s.opts.Addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if ln, err = s.splitEMQCLI(ln); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	s.addr = ln.Addr().String()
	scheme := "http"
	if s.opts.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(s.opts.TLSCert, s.opts.TLSKey)
		if err != nil {
			ln.Close()
			return fmt.Errorf("admin-tls-cert %s, admin-tls-key %s: %w", s.opts.TLSCert, s.opts.TLSKey, err)
		}
		// ServeTLS offers HTTP/2 too: one connection carries every
		// dashboard tab's event streams.
		s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		scheme = "https"
		go func() {
			if err := s.srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("admin: HTTPS stopped", "err", err)
			}
		}()
	} else {
		go func() {
			if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("admin: HTTP stopped", "err", err)
			}
		}()
	}
	s.log.Info("admin API listening", "admin", s.addr, "dashboard", scheme+"://"+s.addr+"/ui/")
	return nil
}

// Addr is the bound host:port ("" before Start, or with no Addr).
func (s *Server) Addr() string { return s.addr }

// Close stops the listener and its connections at once.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	if s.cli != nil {
		s.cli.Close()
	}
	return s.srv.Close()
}
