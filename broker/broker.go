package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/lograte"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

// JournalFile is the journal's file name inside the data directory.
const JournalFile = "emq.db"

// The two endpoints; a peer is known by its endpoint and routing id.
// A sender in this process (Enqueue) is known as one of local's.
const (
	frontend = 0
	backend  = 1
	local    = 2
)

type peerKey struct {
	ep int
	id string
}

// inbound is one message from a reader goroutine, decoded.
type inbound struct {
	from peerKey
	msg  emqp.Message
	err  error     // the decoder's refusal
	held zmtp.Held // of the receive budget, released once handled
	// answer takes the loop's answer to a local sender's message
	// (Enqueue): its ACK or ERROR.
	answer func(emqp.Message)
}

// Broker is a running broker. New opens the journal; Run replays it, binds
// the sockets and serves until its context ends.
type Broker struct {
	opts    Options
	log     *slog.Logger
	journal loopJournal
	stats   counts
	observe Observer // never nil (Options.Observer, or one that ignores all)

	routers [2]*zmtp.Router
	pub     atomic.Pointer[zmtp.Pub]    // pub/sub's PUB endpoint (pubsub.go); nil when off
	routes  atomic.Pointer[routes]      // the placement, for a shard (routes.go); never nil
	pubIn   atomic.Pointer[zmtp.Router] // PUBLISH only, EventMQ's emq-pubsub address
	pubLog  *lograte.Limiter            // PUBLISH refused on the publisher endpoint
	budget  *zmtp.Budget                // of received messages, shared by both endpoints
	inbox   chan inbound
	stopped chan struct{} // closed when the loop stops reading the inbox
	done    chan struct{} // closed when Run has returned (the journal closed)

	rekeyWatched atomic.Bool   // watchRekey runs
	ready        chan struct{} // closed once replay is done and sockets are bound
	serving      atomic.Bool   // ready, and not stopping (Serving)

	creds       atomic.Pointer[credentials] // the peers CURVE and PLAIN allow (security.go)
	curveSecret zmtp.Key
	forbidLog   *lograte.Limiter // messages their sender's roles do not allow
	guesses     guesses          // wrong PLAIN passwords by address

	running  atomic.Bool   // the loop answers query and change (api.go)
	started  atomic.Bool   // Run was called
	draining chan struct{} // closed by Shutdown: drain and stop
	hurry    chan struct{} // closed by Close, or a Shutdown whose ctx ended
	drained  sync.Once
	hurried  sync.Once

	postMu   sync.Mutex
	posted   []func()
	loopGone bool       // Run is over: a post runs at once (runLate)
	lateMu   sync.Mutex // held while a post runs after Run
	wake     chan struct{}
	localSeq atomic.Uint64 // names local senders (Enqueue)

	// Owned by the loop.
	phase        phase
	jobs         jobMap
	clientIDs    map[string]string             // see intern
	resent       map[*job][]peerKey            // REQUESTs to answer when a job's write lands
	bulksWaiting map[*job][]parkedBulk         // BULKs to handle again when a job's write lands (bulk.go)
	locals       map[string]func(emqp.Message) // local senders waiting for an answer (enqueue.go)
	awaiting     map[string][]chan struct{}    // AwaitJob's callers, by msgid (enqueue.go)
	ending       map[string]int                // Completes and Burys not yet landed, by msgid
	queues       map[string]*queue
	peers        map[peerKey]*peer    // workers and schedulers: the one peer table
	scheds       map[string]*schedule // the schedules, by id (schedules.go)
	schedWriting map[string]int       // schedule writes under way, by id
	schedGen     uint64               // schedule writes landed
	schedulers   []*peer              // the order SCHEDULEs go round in
	timers       deadlines            // every deadline (deadlines.go)
	epoch        time.Time            // deadlines count from it (see at)
	clock        *time.Timer          // rings at the earliest deadline
	armed        bool                 // the clock is set, to ring at armedAt
	armedAt      int64
	beat         alarm // HEARTBEAT to every peer
	sweep        alarm // delete expired results
	drainEnd     alarm // the end of a drain
	readLater    alarm // payloads wait for the send queues (payloads.go)
	inFlight     int   // jobs held by workers
	cached       int64 // bytes of payloads held (payloads.go)
	toRead       []readReq
	readBusy     bool                                       // a read of payloads is under way
	idle         []*peer                                    // workers given a slot back this turn (payloads.go)
	conns        *zmtp.ConnLimit                            // every eMQP and pub/sub endpoint's connections together
	toFill       []*queue                                   // queues whose concurrency freed a place this turn (controls.go)
	listeners    []*listener                                // of the event stream (events.go)
	trails       map[*job][]store.TrailEvent                // events of jobs not yet written to their trail (events.go)
	progressOf   map[*job]*progressReport                   // the latest PROGRESS of jobs in flight (cancel.go)
	tr           *tracing                                   // spans of jobs; nil = tracing off (tracing.go)
	controls     map[string]store.QueueSettings             // the operator's queue controls that apply (controls.go)
	controlsNext map[string]pendingControls                 // written, not yet durable (controls.go)
	tenantSet    map[string]map[string]store.TenantSettings // tenants' own settings, by queue (fair.go)
	tenantNext   map[tenantKey]pendingTenant                // written, not yet durable (tenants.go)
	limiters     map[string]*limiter                        // by name (limiters.go)
	limiterNext  map[string]pendingLimiter                  // written, not yet durable (tenants.go)
	lastServed   map[string]time.Time                       // queues without workers: when the last left (why.go)
	journaling   int                                        // appends not yet done
	fenced       error                                      // the journal's ErrFenced: stop serving
	out          outbox
	useSeq       uint64           // for least-recently-used workers
	errLog       *lograte.Limiter // protocol errors
	readLog      *lograte.Limiter // payloads the journal could not read
	damageLog    *lograte.Limiter // values the journal found damaged
}

// phase is where the broker is in its life: serving, then draining (no
// new jobs, nothing dispatched, waiting for REPLYs of jobs in flight),
// then closing (goodbyes said, journal writes landing).
type phase uint8

const (
	serving phase = iota
	draining
	closing
)

// New checks opts and opens the journal (Options.OpenJournal).
func New(opts Options) (*Broker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.OpenJournal == nil {
		return nil, errors.New("broker: no journal: set Options.OpenJournal (package boltjournal's Open opens the bbolt file in DataDir)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Broker{
		opts:         opts,
		log:          opts.Logger,
		inbox:        make(chan inbound, 4096),
		stopped:      make(chan struct{}),
		done:         make(chan struct{}),
		ready:        make(chan struct{}),
		draining:     make(chan struct{}),
		hurry:        make(chan struct{}),
		wake:         make(chan struct{}, 1),
		jobs:         newJobMap(),
		clientIDs:    make(map[string]string),
		resent:       make(map[*job][]peerKey),
		bulksWaiting: make(map[*job][]parkedBulk),
		locals:       make(map[string]func(emqp.Message)),
		awaiting:     make(map[string][]chan struct{}),
		ending:       make(map[string]int),
		queues:       make(map[string]*queue),
		controls:     make(map[string]store.QueueSettings),
		trails:       make(map[*job][]store.TrailEvent),
		progressOf:   make(map[*job]*progressReport),
		controlsNext: make(map[string]pendingControls),
		tenantSet:    make(map[string]map[string]store.TenantSettings),
		tenantNext:   make(map[tenantKey]pendingTenant),
		limiters:     make(map[string]*limiter),
		limiterNext:  make(map[string]pendingLimiter),
		lastServed:   make(map[string]time.Time),
		peers:        make(map[peerKey]*peer),
		scheds:       make(map[string]*schedule),
		schedWriting: make(map[string]int),
		epoch:        time.Now(),
		clock:        time.NewTimer(time.Hour),
		tr:           newTracing(opts.TracerProvider),
	}
	b.clock.Stop()
	b.errLog = lograte.New(logBurst, "protocol errors not logged in the last second")
	b.readLog = lograte.New(logBurst, "payload reads that failed and were not logged in the last second")
	b.damageLog = lograte.New(logBurst, "damaged journal values not logged in the last second")
	b.pubLog = lograte.New(logBurst, "PUBLISH refusals not logged in the last second")
	r, err := newRoutes(opts.Shard, opts.Routes)
	if err != nil {
		return nil, err
	}
	b.routes.Store(r)
	b.forbidLog = lograte.New(logBurst, "forbidden messages not logged in the last second")
	creds, err := loadCredentials(&b.opts)
	if err != nil {
		return nil, err
	}
	b.creds.Store(creds)
	if opts.CurveSecretKeyFile != "" {
		if b.curveSecret, err = zmtp.ReadKeyFile(opts.CurveSecretKeyFile); err != nil {
			return nil, fmt.Errorf("curve-secret-key-file: %w", err)
		}
	}
	b.budget = zmtp.NewBudget(opts.MaxReceiveBuffer)
	b.conns = zmtp.NewConnLimit(opts.MaxConnections, opts.MaxConnectionsPerIP)
	b.beat.fire = b.heartbeat
	b.sweep.fire = b.expireResults
	b.drainEnd.fire = b.drainTimeout
	b.readLater.fire = func(time.Time) {} // only wakes the loop: the end of its turn reads
	b.observe = opts.Observer
	if b.observe == nil {
		b.observe = ignore{}
	}
	j, err := opts.OpenJournal(JournalSetup{Options: opts, OnCommit: b.observe.Committed, OnDamage: b.damaged})
	if err != nil {
		return nil, err
	}
	b.journal = newLoopJournal(j, b)
	b.journal.Follow(b.workflowChanged, opts.ResultTTL)
	return b, nil
}

// damaged is the journal's word that a stored value failed its checksum
// and is being moved aside (a job to the dead letters): counted, logged.
func (b *Broker) damaged(d store.Damage) {
	b.stats.JournalDamaged.Add(1)
	if d.Bucket == nil {
		return // the file's structure, not a value: the journal has logged it
	}
	b.damageLog.Warn(b.log, "journal: a stored value fails its checksum: it is moved aside, never served as good (a job: to the dead letters)",
		"journal", journalName(b.journal.j), "bucket", string(d.Bucket), "key", printableID(string(d.Key)), "why", d.Reason)
}

// journalName names the journal in logs: its String, or its type.
func journalName(j store.Journal) string {
	if s, ok := j.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", j)
}

// Ready is closed once the journal is replayed and the sockets are bound.
func (b *Broker) Ready() <-chan struct{} { return b.ready }

// Frontend is the bound frontend endpoint (after Ready).
func (b *Broker) Frontend() string { return b.routers[frontend].Endpoint() }

// PublisherIncoming is the bound PUBLISH endpoint ("" when off).
func (b *Broker) PublisherIncoming() string {
	if r := b.pubIn.Load(); r != nil {
		return r.Endpoint()
	}
	return ""
}

// PublisherOutgoing is the bound endpoint SUB sockets connect to ("" when
// pub/sub is off).
func (b *Broker) PublisherOutgoing() string {
	if p := b.pub.Load(); p != nil {
		return p.Endpoint()
	}
	return ""
}

// Backend is the bound backend endpoint (after Ready).
func (b *Broker) Backend() string { return b.routers[backend].Endpoint() }

// Stats returns a copy of the broker's counters.
func (b *Broker) Stats() Stats { return b.stats.snapshot() }

// Stopped is closed when the broker stops serving: its loop has ended
// (Run is closing the journal, or has returned).
func (b *Broker) Stopped() <-chan struct{} { return b.stopped }

// Serving reports whether the broker is ready and not stopping (an admin
// API's /readyz).
func (b *Broker) Serving() bool { return b.serving.Load() }

// Run replays the journal, binds the endpoints and serves until ctx ends
// or Shutdown or Close is called. When ctx ends it shuts down as
// Shutdown does: it stops taking work and drains (REQUESTs get ERROR
// unavailable, nothing more is dispatched, and the REPLYs of jobs in
// flight are awaited up to DrainTimeout). Then it says goodbye to its
// peers, lets the journal writes in progress land and closes the
// journal. It returns nil after a clean shutdown, and an error wrapping
// store.ErrFenced when the journal fenced it off. Run is called once.
func (b *Broker) Run(ctx context.Context) (err error) {
	if b.started.Swap(true) {
		return errors.New("broker: Run after Close, or a second time")
	}
	defer close(b.done)
	defer func() {
		if cerr := b.journal.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the journal: %w", cerr)
		}
		// What the journal's last reports posted runs now, on this
		// goroutine as on the loop: an admin change waiting for its
		// outcome gets it. A report that comes later still (a journal
		// calling back after Close) runs when it is posted.
		b.postMu.Lock()
		b.loopGone = true
		b.postMu.Unlock()
		b.runLate()
	}()
	start := time.Now()
	if err := b.loadControls(); err != nil {
		return err
	}
	if err := b.loadLimiters(); err != nil {
		return err
	}
	n, err := b.replay()
	if err != nil {
		return err
	}
	debug.FreeOSMemory() // what decoding the journal left behind
	b.observe.Replayed(time.Since(start))
	ns, err := b.replaySchedules()
	if err != nil {
		return fmt.Errorf("replaying the journal's schedules: %w", err)
	}
	b.log.Info("journal replayed", "jobs", n, "schedules", ns, "took", time.Since(start).Round(time.Millisecond),
		"journal", journalName(b.journal.j))
	if s := b.journal.RekeyStatus(); s.Running {
		b.log.Info("journal rekey: going on where it was", "key", s.Key, "rate", s.Rate)
		b.watchRekey()
	}

	for ep, addr := range []string{b.opts.Frontend, b.opts.Backend} {
		r, err := zmtp.Listen(addr, b.routerOptions(ep))
		if err != nil {
			b.closeRouters()
			return fmt.Errorf("%s: %w", endpointName(ep), err)
		}
		b.routers[ep] = r
	}
	if err := b.startPubSub(); err != nil {
		b.closeRouters()
		return err
	}
	b.log.Info("broker listening", "frontend", b.Frontend(), "backend", b.Backend(),
		"publisher_incoming", b.PublisherIncoming(), "publisher_outgoing", b.PublisherOutgoing())
	if b.opts.secured() {
		c := b.creds.Load()
		args := []any{"curve_clients", len(c.keys), "plain_users", len(c.users)}
		if b.opts.CurveSecretKeyFile != "" {
			args = append(args, "curve_public_key", zmtp.PublicKey(b.curveSecret).String())
		}
		b.log.Info("eMQP endpoints locked: CURVE or PLAIN, with roles", args...)
		if b.opts.PlainUsers != "" {
			b.log.Warn("PLAIN sends passwords in clear: use it only on networks you trust, CURVE elsewhere")
		}
	}
	b.timers.set(&b.sweep, b.at(time.Now()))
	b.running.Store(true)
	b.serving.Store(true)
	close(b.ready)

	stopTracing := b.tr.run()
	b.loop(ctx)
	stopTracing()

	if b.fenced != nil {
		return fmt.Errorf("broker stopped serving: %w", b.fenced)
	}
	return nil
}

// Shutdown stops the broker gracefully, as net/http's Server.Shutdown
// does a server: it stops taking work and drains (see Run), and returns
// once Run has returned. If ctx ends first, the drain is cut short as by
// Close (what is still in flight stays journaled and runs again after
// the next start), and Shutdown returns ctx's error once Run has. It may
// be called from any goroutine, more than once; before Run, it only
// marks the broker to stop at once when Run starts.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.drained.Do(func() { close(b.draining) })
	if !b.started.Load() {
		return nil
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		b.hurryUp()
		<-b.done
		return ctx.Err()
	}
}

// Close stops the broker at once, without a drain (a second SIGTERM):
// what is in flight stays journaled and runs again after the next start.
// It returns once Run has returned; a broker never run closes its
// journal. It may be called from any goroutine, more than once.
func (b *Broker) Close() error {
	b.hurryUp()
	if b.started.Swap(true) { // Run was called: it closes the journal
		<-b.done
		return nil
	}
	defer close(b.done)
	return b.journal.Close()
}

func (b *Broker) hurryUp() { b.hurried.Do(func() { close(b.hurry) }) }

func (b *Broker) routerOptions(ep int) zmtp.Options {
	return zmtp.Options{
		MaxFrameSize:   b.opts.MaxFrameSize,
		MaxFrames:      b.opts.maxFrames(),
		Budget:         b.budget,
		Limit:          b.conns,
		SendQueueBytes: b.opts.MaxSendBuffer + b.opts.MaxFrameSize, // beyond what the paced payload reads can queue
		Logger:         b.log,
		Security:       b.serverSecurity(0),
		Check:          b.checkRoles(ep),
		Receive: func(id string, frames [][]byte, held zmtp.Held) {
			m, err := emqp.Decode(frames)
			if _, ok := m.(*emqp.Publish); ok && b.frontendPublish(frames) {
				b.budget.Release(held)
				return
			}
			select {
			case b.inbox <- inbound{from: peerKey{ep, id}, msg: m, err: err, held: held}:
			case <-b.stopped:
			}
		},
		Undelivered: func(id string, frames [][]byte) {
			if msgid, ok := requestID(frames); ok {
				b.post(func() { b.undelivered(peerKey{ep, id}, msgid) })
			}
		},
		Refused: func(id string, err error) [][]byte {
			code, text := emqp.CodeUnavailable, "the broker's receive buffer (max-receive-buffer) had no room for this message for 10 s; closing the connection: send it again"
			var frames [][]byte
			var tl *zmtp.TooLargeError
			var nr *zmtp.NoRoomError
			var tm *zmtp.TooManyFramesError
			switch {
			case errors.As(err, &tm):
				code, frames = emqp.CodeTooLarge, tm.Frames
				text = fmt.Sprintf("message of more than %d frames: a BULK holds at most %d jobs of 4 frames (max-bulk); closing the connection", tm.Max, b.opts.maxBulk())
			case errors.As(err, &tl) && tl.Budget:
				code, frames = emqp.CodeTooLarge, tl.Frames
				text = fmt.Sprintf("frame of %d bytes does not fit in the receive buffer: this message may hold %d more bytes (max-receive-buffer gives one message up to seven eighths of it); closing the connection", tl.Size, tl.Max)
			case errors.As(err, &tl):
				code, frames = emqp.CodeTooLarge, tl.Frames
				text = fmt.Sprintf("frame of %d bytes is over max-frame-size (%d bytes); closing the connection", tl.Size, tl.Max)
			case errors.As(err, &nr):
				frames = nr.Frames
			}
			b.stats.countError(code)
			ref := "" // the refused message's msgid, when its frame came before
			if len(frames) > 3 && len(frames[3]) <= emqp.MaxIDLen {
				ref = string(frames[3])
			}
			return emqp.Encode(&emqp.Error{MsgID: emqp.NewID(), RefMsgID: ref, Code: code, Text: text})
		},
	}
}

// post runs fn on the loop. It never blocks: the journal's goroutine and
// the connection writers call it. After Run, with no loop left, fn runs
// at once, one posted closure at a time.
func (b *Broker) post(fn func()) {
	b.postMu.Lock()
	b.posted = append(b.posted, fn)
	late := b.loopGone
	b.postMu.Unlock()
	if late {
		b.runLate()
		return
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *Broker) runPosted() {
	b.postMu.Lock()
	fns := b.posted
	b.posted = nil
	b.postMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// runLate runs what is posted after Run, as the loop would have: one at
// a time (whoever holds lateMu runs the others' posts too).
func (b *Broker) runLate() {
	for {
		if !b.lateMu.TryLock() {
			return // its holder looks again after it lets go
		}
		b.runPosted()
		b.lateMu.Unlock()
		b.postMu.Lock()
		empty := len(b.posted) == 0
		b.postMu.Unlock()
		if empty {
			return
		}
	}
}

// loop is the one goroutine that owns the broker's state. It sleeps until
// a message, a posted closure or the earliest deadline.
func (b *Broker) loop(ctx context.Context) {
	stop, shutdown, hurry := ctx.Done(), b.draining, b.hurry
	for {
		b.arm()
		select {
		case in := <-b.inbox:
			b.handle(in)
			b.handleWaiting()
		case <-b.wake:
			b.runPosted()
		case <-b.clock.C:
			b.armed = false
			b.fireDue(time.Now())
		case <-stop:
			stop, shutdown = nil, nil
			b.drain(time.Now())
		case <-shutdown:
			stop, shutdown = nil, nil
			b.drain(time.Now())
		case <-hurry:
			hurry = nil
			if b.phase == draining {
				b.log.Warn("drain cut short: jobs still in flight stay journaled and run again after the next start", "in_flight", b.inFlight)
			}
			b.phase = closing
		}
		b.offerIdle()
		b.fillFreed()
		b.flush()
		b.readPayloads()
		if b.phase == draining && b.inFlight == 0 {
			b.log.Info("drained: no job is in flight")
			b.phase = closing
		}
		if b.phase == closing {
			b.shutdown()
			return
		}
	}
}

// drain stops taking work: REQUESTs are refused, nothing is dispatched,
// /readyz says no; REPLYs of the jobs in flight complete them as usual,
// for up to DrainTimeout.
func (b *Broker) drain(now time.Time) {
	b.serving.Store(false)
	if b.opts.DrainTimeout == 0 {
		b.phase = closing
		return
	}
	b.phase = draining
	b.log.Info("broker draining: new jobs are refused; waiting for the jobs in flight",
		"in_flight", b.inFlight, "drain_timeout", b.opts.DrainTimeout)
	b.timers.set(&b.drainEnd, b.after(now, b.opts.DrainTimeout))
}

// drainTimeout ends a drain that took DrainTimeout.
func (b *Broker) drainTimeout(time.Time) {
	b.log.Warn("drain timeout: jobs still in flight stay journaled and run again after the next start",
		"in_flight", b.inFlight, "drain_timeout", b.opts.DrainTimeout)
	b.phase = closing
}

// Fence stops the broker at once, from any goroutine, as a journal
// that says err (wrapping store.ErrFenced) does: nothing more is ACKed
// or dispatched, and Run returns err.
func (b *Broker) Fence(err error) { b.post(func() { b.fence(err) }) }

// fence stops the broker for good: the journal says another owner writes
// it now. From this moment nothing is ACKed or dispatched; at the end of
// the loop's turn the peers are told goodbye and Run returns err.
func (b *Broker) fence(err error) {
	if b.fenced == nil {
		b.fenced = err
		b.log.Error("the journal fenced this broker off; it stops serving", "err", err)
	}
	b.phase = closing
	b.serving.Store(false)
}

// at is t on the deadlines' clock: nanoseconds since epoch, read on the
// monotonic clock, so that a step of the wall clock (NTP, a resumed VM)
// moves no deadline.
func (b *Broker) at(t time.Time) int64 { return int64(t.Sub(b.epoch)) }

// after is the deadline d after now. A wait is at most maxWait.
func (b *Broker) after(now time.Time, d time.Duration) int64 {
	return b.at(now) + int64(min(d, maxWait))
}

// maxWait bounds every wait (delay, timeout, backoff): longer ones are
// taken as this long, so no deadline and no stored time can overflow.
const maxWait = 100 * 365 * 24 * time.Hour

// arm sets the clock to ring at the earliest deadline, when that changed.
func (b *Broker) arm() {
	at, ok := b.timers.next()
	if ok == b.armed && at == b.armedAt {
		return
	}
	b.armed, b.armedAt = ok, at
	if !ok {
		b.clock.Stop()
		return
	}
	b.clock.Reset(time.Duration(at - b.at(time.Now())))
}

// fireDue runs every deadline that is due.
func (b *Broker) fireDue(now time.Time) {
	for {
		x, ok := b.timers.popDue(b.at(now))
		if !ok {
			return
		}
		switch x := x.(type) {
		case *job:
			b.jobDue(x, now)
		case *peer:
			b.peerDue(x, now)
		case *schedule:
			b.scheduleDue(x)
		case *alarm:
			x.fire(now)
		}
	}
}

// expireResults deletes kept results whose time is up, and comes again.
func (b *Broker) expireResults(now time.Time) {
	b.journal.ExpireResults(now, func(n int, err error) {
		b.writeFailed(err, "journal could not delete expired results", "")
		if n >= store.ExpireBatch { // more are due: go on at once
			b.timers.set(&b.sweep, b.at(time.Now()))
		}
	})
	// Every minute at most, and once a minute with retain-done off: done
	// jobs kept under an earlier setting go when their time is up.
	every := time.Minute
	if b.opts.ResultTTL > 0 {
		every = min(b.opts.ResultTTL, time.Minute)
	}
	b.timers.set(&b.sweep, b.after(now, every))
}

// handleWaiting handles what else is in the inbox, up to a bound, so that
// their answers leave in one write per peer.
func (b *Broker) handleWaiting() {
	for range 256 {
		select {
		case in := <-b.inbox:
			b.handle(in)
		default:
			return
		}
	}
}

// shutdown: refuse new jobs, say goodbye, let journal writes land, flush.
func (b *Broker) shutdown() {
	for len(b.listeners) > 0 { // their streams end
		b.unlisten(b.listeners[0], ErrStopped)
	}
	b.log.Info("broker stopping", "journal_writes_in_progress", b.journaling, "in_flight", b.inFlight)
	b.phase = closing
	b.serving.Store(false)
	for key := range b.peers {
		b.send(key, &emqp.Kbye{MsgID: emqp.NewID()})
	}
	deadline := time.NewTimer(b.opts.ShutdownTimeout)
	defer deadline.Stop()
	b.flush()
	for b.journaling > 0 {
		select {
		case in := <-b.inbox:
			b.handle(in)
		case <-b.wake:
			b.runPosted()
		case <-deadline.C:
			b.log.Warn("broker stopped before every journal write was confirmed", "in_progress", b.journaling)
			b.journaling = 0
		}
		b.flush()
	}
	b.running.Store(false)
	close(b.stopped)
	b.closeRouters()
	b.clock.Stop()
	b.log.Info("broker stopped")
}

func (b *Broker) closeRouters() {
	for _, r := range b.routers {
		if r != nil {
			r.Close()
		}
	}
	b.stopPubSub()
}

// handle is one message from a peer. It starts with the peer's entry in
// the peer table: nil for a client, or a peer that has not INFORMed.
func (b *Broker) handle(in inbound) {
	if in.err != nil {
		b.budget.Release(in.held)
		b.protocolError(in.from, in.err)
		return
	}
	if in.answer != nil {
		b.locals[in.from.id] = in.answer
	}
	p := b.peers[in.from]
	if p != nil {
		p.lastSeen = time.Now()
	}
	switch m := in.msg.(type) { // hold their frames until journaled
	case *emqp.Request:
		b.request(in.from, m, in.held)
		return
	case *emqp.Bulk:
		b.bulk(in.from, m, in.held)
		return
	}
	// What the message carries is forwarded (a REPLY's payload) or done
	// with when this returns: its frames now count only in send queues.
	defer b.budget.Release(in.held)
	switch m := in.msg.(type) {
	case *emqp.Inform:
		b.inform(p, in.from, m)
	case *emqp.Ready:
		if p.isWorker() {
			p.free++
			b.offer(p)
		}
	case *emqp.Reply:
		b.reply(p, m)
	case *emqp.Fail:
		b.fail(p, m)
	case *emqp.Cancel:
		b.clientCancel(in.from, m)
	case *emqp.Progress:
		b.progress(p, m)
	case *emqp.Heartbeat:
		// lastSeen is updated above; a peer that has not INFORMed gets no answer.
	case *emqp.Kbye, *emqp.Disconnect:
		if p != nil {
			b.lose(p, p.role.String()+" said goodbye")
		}
	case *emqp.Routes:
		b.answerRoutes(in.from, m)
	case *emqp.Schedule:
		if b.elsewhere(in.from, m.MsgID, m.Queue) {
			break
		}
		if b.opts.ForwardSchedules {
			b.forwardSchedule(in.from, m)
		} else {
			b.putSchedule(in.from, m)
		}
	case *emqp.Unschedule:
		if b.opts.ForwardSchedules {
			b.forwardUnschedule(in.from, m)
		} else {
			b.removeSchedule(in.from, m)
		}
	case *emqp.Publish: // refused by its reader: fanned-out ones do not come here
		if code, text := b.publishRefusal([]byte(m.Topic), m.Message); code != "" {
			b.refuse(in.from, m.MsgID, code, text)
		}
	default: // ACK, ERROR: not for the broker
		b.stats.Ignored.Add(1)
	}
}

// send encodes m for peer key. It leaves with the next flush.
func (b *Broker) send(key peerKey, m emqp.Message) {
	if key.ep == local {
		b.answerLocal(key, m)
		return
	}
	b.out.add(key, emqp.Encode(m))
}

// flush hands what the loop has sent to the connections, one batch per
// peer. A REQUEST that cannot be handed over goes back to its queue, which
// may send again: flush runs until nothing is left.
func (b *Broker) flush() {
	b.tr.flush()
	for b.out.len() > 0 {
		keys, batches := b.out.take()
		for i, key := range keys {
			if err := b.routers[key.ep].SendBatch(key.id, batches[i]); err != nil {
				for _, frames := range batches[i] {
					if msgid, ok := requestID(frames); ok {
						b.undelivered(key, msgid)
					}
				}
			}
		}
	}
}

// requestID returns the msgid of an encoded REQUEST.
func requestID(frames [][]byte) (string, bool) {
	if len(frames) > 3 && string(frames[2]) == string(emqp.CmdRequest) {
		return string(frames[3]), true
	}
	return "", false
}

// outbox gathers the messages of one loop turn by peer.
type outbox struct {
	index   map[peerKey]int
	keys    []peerKey
	batches [][][][]byte
}

func (o *outbox) len() int { return len(o.keys) }

func (o *outbox) add(key peerKey, frames [][]byte) {
	if o.index == nil {
		o.index = make(map[peerKey]int)
	}
	i, ok := o.index[key]
	if !ok {
		i = len(o.keys)
		o.index[key] = i
		o.keys = append(o.keys, key)
		o.batches = append(o.batches, nil)
	}
	o.batches[i] = append(o.batches[i], frames)
}

// take returns the gathered batches and empties the outbox.
func (o *outbox) take() ([]peerKey, [][][][]byte) {
	keys, batches := o.keys, o.batches
	o.keys, o.batches = nil, nil
	clear(o.index)
	return keys, batches
}

func (b *Broker) ack(key peerKey, msgid string) {
	b.send(key, &emqp.Ack{MsgID: emqp.NewID(), AckedID: msgid})
}

// refuse answers ERROR.
func (b *Broker) refuse(key peerKey, ref, code, text string) {
	b.stats.countError(code)
	b.send(key, &emqp.Error{MsgID: emqp.NewID(), RefMsgID: ref, Code: code, Text: text})
}

// protocolError answers a message the decoder refused.
func (b *Broker) protocolError(from peerKey, err error) {
	code, ref := protocolCode(err)
	b.refuse(from, ref, code, err.Error())
	b.errLog.Warn(b.log, "protocol error", "code", code, "peer", peerName(from), "err", err)
}

func peerName(k peerKey) string {
	return endpointName(k.ep) + "/" + printableID(k.id)
}

func endpointName(ep int) string { return [3]string{"frontend", "backend", "local"}[ep] }

func printableID(id string) string { return zmtp.PrintableID(id) }
