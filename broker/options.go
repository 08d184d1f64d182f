package broker

import (
	"github.com/eventmq/emq/emqp"

	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/internal/addr"
	"github.com/eventmq/emq/store"
)

// JournalSetup is what New hands Options.OpenJournal: the broker's
// options and the hooks the journal reports through.
type JournalSetup struct {
	Options Options // checked, with a Logger
	// OnCommit is called after each commit with the writes it held and
	// how long it took (Observer.Committed).
	OnCommit func(writes int, took time.Duration)
	// OnDamage is told of each stored value that fails its checksum and
	// is moved aside; the broker counts and logs it.
	OnDamage func(store.Damage)
}

// Options configure a Broker. Start from DefaultOptions.
type Options struct {
	Frontend string // ROUTER endpoint for clients, tcp://host:port
	Backend  string // ROUTER endpoint for workers, tcp://host:port
	DataDir  string // holds the journal file, emq.db (package boltjournal)

	// Who may use the eMQP endpoints (security.go). CurveSecretKeyFile
	// holds the broker's CURVE secret key (one Z85 line, emq keygen) and
	// CurveClients the peers' public keys with their roles, a line each:
	// "Z85KEY client,worker". PlainUsers holds PLAIN users, a line each:
	// "USER:BCRYPT-HASH:ROLES" (emq passwd). Without any, anyone may do
	// anything, and an endpoint off loopback needs AllowAnonymous.
	CurveSecretKeyFile, CurveClients string
	PlainUsers                       string
	AllowAnonymous                   bool

	// OpenJournal opens the journal the broker writes to: package
	// boltjournal's Open opens (or creates) the bbolt file JournalFile in
	// DataDir. New calls it once, and Run (or Close) closes what it
	// returned.
	OpenJournal func(JournalSetup) (store.Journal, error)
	// Observer, if set, is told figures as they happen (package admin's
	// metrics implement it).
	Observer Observer
	// EventBuffer is how many events a listener of the event stream may
	// fall behind before it is dropped; MaxEventListeners how many may
	// listen at once (events.go). Each buffer holds EventBuffer events of
	// about 200 bytes.
	EventBuffer       int
	MaxEventListeners int

	// Queues are the default controls of queues, by name: what applies to
	// a queue until an operator stores its own (ChangeQueue, emq queues).
	Queues map[string]store.QueueSettings

	HeartbeatInterval time.Duration // HEARTBEAT to each peer (worker, scheduler) this often
	HeartbeatTimeout  time.Duration // a peer silent this long is lost

	// OverdueAfter: a job without a timeout held by a worker this long is
	// overdue (an event, a count, emq jobs why says so); it runs on. 0 =
	// never. A job with a timeout is timed out at its deadline instead.
	OverdueAfter time.Duration

	MaxFrameSize int64 // largest frame accepted, in bytes
	MaxJobSize   int   // largest job the bbolt journal stores (payload, headers, ids), in bytes

	// The bbolt journal's write-ahead log (package boltjournal): its
	// segment files' size; how much it may hold that the bbolt file does
	// not yet (memory: about that much at most), past which REQUESTs get
	// ERROR unavailable until the checkpoint catches up; and whether to
	// open a log damaged in the middle, keeping every good record
	// (--journal-recover).
	JournalSegmentSize int64
	JournalMaxLog      int64
	JournalRecover     bool
	// JournalKeys, if set, encrypt the journal at rest (--journal-keys:
	// payloads, headers, errors, results, schedules; store/encrypt.go).
	// A journal encrypted before opens only with its keys.
	JournalKeys  *store.Keyring
	MaxPending   int   // live jobs per queue beyond which REQUEST gets queue_full; 0 = no limit
	MaxBulk      int   // most jobs in one BULK; 0 = DefaultMaxBulk
	PayloadCache int64 // bytes of payloads held in memory for their jobs' dispatch; the rest is read from the journal
	// MaxReceiveBuffer bounds the bytes of received messages held at once,
	// all connections together (read, or waiting for the journal); a
	// connection that would go beyond it is not read until there is room.
	// A frame larger than seven eighths of it is refused as too_large.
	MaxReceiveBuffer int64
	// MaxSendBuffer bounds the bytes queued for sending: payloads are read
	// from the journal only while all connections together have less
	// queued, and one connection with more than it plus MaxFrameSize
	// waiting is dropped as too slow.
	MaxSendBuffer int64
	ResultTTL     time.Duration

	RetryBackoff    time.Duration // wait before the first retry of a FAILed job; doubles each attempt
	MaxRetryBackoff time.Duration
	DrainTimeout    time.Duration // at stop, wait this long for the REPLYs of jobs in flight; 0 = do not wait

	// ForwardSchedules passes SCHEDULE and UNSCHEDULE to EventMQ scheduler
	// peers, which keep the schedules (EventMQ's split), instead of
	// keeping them in the journal.
	ForwardSchedules bool

	// Shard is this broker's shard when queues are spread over several
	// broker groups ("" = the only one): it takes jobs only for the
	// queues Routes places on it, and answers the others with ERROR moved
	// (routes.go). Routes is the placement it starts with; SetRoutes
	// changes it.
	Shard  string
	Routes *emqp.RouteTable

	// Pub/sub (pubsub.go). PUBLISH is taken on the frontend and on
	// PublisherIncoming ("" = not bound) and fanned out to the ZeroMQ SUB
	// sockets connected to PublisherOutgoing ("" = pub/sub off).
	PublisherIncoming string
	PublisherOutgoing string
	SubscriberHWM     int   // messages queued per subscriber; past it, its messages are dropped
	PublisherBuffer   int64 // bytes queued for every subscriber together; one may hold a quarter
	MaxSubscribers    int   // subscriber connections; more are closed at once
	// MaxConnections bounds the connections of every eMQP and pub/sub
	// endpoint together, handshakes included (each costs a file
	// descriptor); MaxConnectionsPerIP those from one address (0 = no
	// bound). More are closed as soon as they are accepted, counted, and
	// logged a few lines a second. DefaultOptions sets MaxConnections to
	// three quarters of the process's file descriptor limit.
	MaxConnections      int
	MaxConnectionsPerIP int
	// PublisherLastValue sends a new subscription the latest message of
	// each topic it matches, from a cache of LastValueTopics topics and
	// LastValueBytes bytes.
	PublisherLastValue bool
	LastValueTopics    int
	LastValueBytes     int64

	// Now is the clock schedules are due by; nil = time.Now. Tests set it.
	Now             func() time.Time
	ShutdownTimeout time.Duration // for journal writes in progress at shutdown

	Logger *slog.Logger // nil = slog.Default()
	// TracerProvider takes the spans of jobs (the package doc's
	// Tracing); nil = no spans, and nothing paid for them.
	TracerProvider trace.TracerProvider
}

// DefaultOptions are DESIGN.md's defaults.
func DefaultOptions() Options {
	return Options{
		Frontend:           "tcp://127.0.0.1:47290",
		Backend:            "tcp://127.0.0.1:47291",
		DataDir:            "./emq-data",
		HeartbeatInterval:  time.Second,
		HeartbeatTimeout:   5 * time.Second,
		OverdueAfter:       time.Hour,
		MaxFrameSize:       256 << 20,
		MaxJobSize:         256 << 20,
		JournalSegmentSize: 64 << 20,
		JournalMaxLog:      512 << 20,
		MaxPending:         2_000_000,
		MaxBulk:            DefaultMaxBulk,
		PayloadCache:       16 << 20,
		MaxReceiveBuffer:   defaultReceiveBuffer(),
		MaxSendBuffer:      256 << 20,
		ResultTTL:          0,
		RetryBackoff:       time.Second,
		MaxRetryBackoff:    5 * time.Minute,
		DrainTimeout:       10 * time.Second,
		ShutdownTimeout:    10 * time.Second,
		PublisherIncoming:  "tcp://127.0.0.1:47298",
		PublisherOutgoing:  "tcp://127.0.0.1:47299",
		SubscriberHWM:      1000,
		PublisherBuffer:    64 << 20,
		MaxSubscribers:     10000,
		MaxConnections:     defaultMaxConnections(),
		EventBuffer:        4096,
		MaxEventListeners:  32,
		LastValueTopics:    10000,
		LastValueBytes:     16 << 20,
	}
}

// Validate names the first bad field.
func (o Options) Validate() error {
	if o.Shard != "" {
		if err := checkRoutes(o.Shard, o.Routes); err != nil {
			return err
		}
	}
	if o.MaxConnections < 0 || o.MaxConnectionsPerIP < 0 {
		return fmt.Errorf("max-connections and max-connections-per-ip must be 0 (no bound) or more, got %d and %d", o.MaxConnections, o.MaxConnectionsPerIP)
	}
	if o.EventBuffer < 1 || o.EventBuffer > 1<<20 {
		return fmt.Errorf("event-buffer must be 1 to %d events, got %d", 1<<20, o.EventBuffer)
	}
	if o.MaxEventListeners < 0 || o.MaxEventListeners > 10000 {
		return fmt.Errorf("max-event-listeners must be 0 to 10000, got %d", o.MaxEventListeners)
	}
	for name, s := range o.Queues {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("queues.%s: %w", name, err)
		}
		if name == "" || len(name) > store.MaxQueueLen {
			return fmt.Errorf("queues: a queue name must be 1 to %d bytes, got %s", store.MaxQueueLen, emqp.QuoteName(name))
		}
	}
	for _, ep := range []struct{ name, v string }{{"frontend", o.Frontend}, {"backend", o.Backend}} {
		if err := checkEndpoint(ep.v); err != nil {
			return fmt.Errorf("%s: %w", ep.name, err)
		}
	}
	for _, ep := range []struct{ name, v string }{{"publisher-incoming", o.PublisherIncoming}, {"publisher-outgoing", o.PublisherOutgoing}} {
		if ep.v == "" {
			continue
		}
		if err := checkEndpoint(ep.v); err != nil {
			return fmt.Errorf("%s: %w", ep.name, err)
		}
	}
	eps := map[string]string{}
	for _, ep := range []struct{ name, v string }{{"frontend", o.Frontend}, {"backend", o.Backend},
		{"publisher-incoming", o.PublisherIncoming}, {"publisher-outgoing", o.PublisherOutgoing}} {
		if ep.v == "" || strings.HasSuffix(ep.v, ":0") {
			continue
		}
		if other, ok := eps[ep.v]; ok {
			return fmt.Errorf("%s and %s are the same endpoint %q", other, ep.name, ep.v)
		}
		eps[ep.v] = ep.name
	}
	if (o.CurveSecretKeyFile == "") != (o.CurveClients == "") {
		return fmt.Errorf("curve-secret-key-file and curve-clients go together: set both, or neither")
	}
	if strings.HasSuffix(o.CurveSecretKeyFile, ".pub") { // any 32 bytes pass as a secret: this mistake is silent else
		return fmt.Errorf("curve-secret-key-file: %s is a public key file; emq keygen writes the secret key as NAME.key", o.CurveSecretKeyFile)
	}
	if !o.secured() && !o.AllowAnonymous {
		for _, ep := range []struct{ name, v string }{{"frontend", o.Frontend}, {"backend", o.Backend},
			{"publisher-incoming", o.PublisherIncoming}, {"publisher-outgoing", o.PublisherOutgoing}} {
			if ep.v != "" && !addr.Loopback(ep.v) {
				return fmt.Errorf("%s: %s is not a loopback address and anyone who reaches it could send jobs or take them: "+
					"set curve-secret-key-file with curve-clients, or plain-users, or allow-anonymous to accept that", ep.name, ep.v)
			}
		}
	}
	if o.PublisherIncoming != "" && o.PublisherOutgoing == "" {
		return fmt.Errorf("publisher-incoming: %q is set but publisher-outgoing is empty: PUBLISH would reach no one; empty both to turn pub/sub off", o.PublisherIncoming)
	}
	switch {
	case o.DataDir == "" && o.OpenJournal == nil:
		return fmt.Errorf("data-dir: must not be empty")
	case o.HeartbeatInterval <= 0:
		return fmt.Errorf("heartbeat-interval: must be positive, not %v", o.HeartbeatInterval)
	case o.OverdueAfter < 0:
		return fmt.Errorf("overdue-after: must be 0 (never) or positive, not %v", o.OverdueAfter)
	case o.HeartbeatTimeout <= o.HeartbeatInterval:
		return fmt.Errorf("heartbeat-timeout: %v must be longer than heartbeat-interval %v", o.HeartbeatTimeout, o.HeartbeatInterval)
	case o.MaxFrameSize < 1024 || o.MaxFrameSize > 1<<30:
		return fmt.Errorf("max-frame-size: %d is outside 1 KiB to 1 GiB", o.MaxFrameSize)
	case o.MaxJobSize < 1024 || o.MaxJobSize > 1<<30:
		return fmt.Errorf("max-job-size: %d is outside 1 KiB to 1 GiB", o.MaxJobSize)
	case o.JournalSegmentSize < 1<<20 || o.JournalSegmentSize > 1<<30 || o.JournalSegmentSize%8 != 0:
		return fmt.Errorf("journal-segment-size: %d is outside 1 MiB to 1 GiB (a multiple of 8)", o.JournalSegmentSize)
	case o.JournalMaxLog < 1<<20:
		return fmt.Errorf("journal-max-log: %d is under 1 MiB", o.JournalMaxLog)
	case o.MaxReceiveBuffer < 1<<20:
		return fmt.Errorf("max-receive-buffer: %d is under 1 MiB", o.MaxReceiveBuffer)
	case o.MaxSendBuffer < 1<<20:
		return fmt.Errorf("max-send-buffer: %d is under 1 MiB", o.MaxSendBuffer)
	case o.PayloadCache < 0:
		return fmt.Errorf("payload-cache: must not be negative, not %d", o.PayloadCache)
	case o.MaxPending < 0:
		return fmt.Errorf("max-pending: must not be negative, not %d", o.MaxPending)
	case o.MaxBulk < 0 || o.MaxBulk > maxBulkLimit:
		return fmt.Errorf("max-bulk: %d is outside 1 to %d jobs (0: the default, %d)", o.MaxBulk, maxBulkLimit, DefaultMaxBulk)
	case o.ResultTTL < 0:
		return fmt.Errorf("retain-done (result-ttl): must not be negative, not %v", o.ResultTTL)
	case o.RetryBackoff < 0 || o.MaxRetryBackoff < o.RetryBackoff:
		return fmt.Errorf("retry backoff: %v must be between 0 and the maximum %v", o.RetryBackoff, o.MaxRetryBackoff)
	case o.DrainTimeout < 0:
		return fmt.Errorf("drain-timeout: must not be negative, not %v", o.DrainTimeout)
	case o.SubscriberHWM <= 0:
		return fmt.Errorf("subscriber-hwm: must be positive, not %d", o.SubscriberHWM)
	case o.PublisherBuffer < 1<<20:
		return fmt.Errorf("publisher-buffer: %d is under 1 MiB", o.PublisherBuffer)
	case o.MaxSubscribers <= 0:
		return fmt.Errorf("max-subscribers: must be positive, not %d", o.MaxSubscribers)
	case o.LastValueTopics <= 0:
		return fmt.Errorf("last-value-topics: must be positive, not %d", o.LastValueTopics)
	case o.LastValueBytes < 1024:
		return fmt.Errorf("last-value-bytes: %d is under 1 KiB", o.LastValueBytes)
	case o.ShutdownTimeout <= 0:
		return fmt.Errorf("shutdown timeout: must be positive, not %v", o.ShutdownTimeout)
	}
	return nil
}

func checkEndpoint(ep string) error {
	addr, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("%q: want tcp://host:port", ep)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q: %w", ep, err)
	}
	return nil
}

// Observer is told figures as they happen. Its methods run on the
// journal's committer or on the loop: they must be quick, and must not
// call the broker.
type Observer interface {
	// Committed: a journal commit of writes writes took took.
	Committed(writes int, took time.Duration)
	// Replayed: loading the journal at start-up took took.
	Replayed(took time.Duration)
	// Fired: a schedule's fire was made late after its due time.
	Fired(late time.Duration)
	// Acked: a REQUEST was ACKed took after it was read (its journal
	// write included).
	Acked(took time.Duration)
}

// ignore is the Observer of a broker that has none.
type ignore struct{}

func (ignore) Committed(int, time.Duration) {}
func (ignore) Replayed(time.Duration)       {}
func (ignore) Fired(time.Duration)          {}
func (ignore) Acked(time.Duration)          {}
