// Package worker runs jobs from an EMQ broker (EventMQ's "job manager").
//
//	w, err := worker.New(worker.Options{Broker: "tcp://127.0.0.1:47291", Concurrency: 8})
//	w.Handle("email", func(ctx context.Context, job *worker.Job) ([]byte, error) {
//		return nil, send(ctx, job.Payload)
//	})
//	err = w.Run(ctx) // until ctx ends, then a graceful stop
//
// # How it talks to the broker
//
// The worker INFORMs the broker of its queues and offers one READY per free
// slot, never more, so no more than Concurrency jobs run at once. A job's
// handler gets a context that ends at the job's timeout:N, at its CANCEL,
// or when the worker stops for good; its result becomes a REPLY, its
// error (or panic) a FAIL, which the broker retries. Each finished job
// frees its slot: a new READY follows the REPLY or FAIL in the same write.
//
// Heartbeats go both ways every HeartbeatInterval. When the broker has
// been silent for 1.5 intervals (a HEARTBEAT missed), the worker dials
// the other endpoints it was given beside its connection, at a redial's
// pace; a broker that greets there and ACKs its INFORM serves (only a
// group's leader listens), and the worker switches to it at once (the
// client package's doc, Reliability, has the reasoning). When the broker
// has been silent for HeartbeatTimeout, or the connection breaks, or the
// broker says KBYE, the worker makes a new connection (same routing id),
// INFORMs again and offers its free slots again. Jobs running meanwhile
// finish; their REPLYs wait and are sent once connected (to a broker
// that took over, which ignores them: it runs those jobs again).
//
// When the broker sends CANCEL for a job running here (an operator
// cancelled it), the job's context ends with the cause ErrCancelled. The
// CANCEL is not answered: the handler's FAIL or REPLY, which the broker
// ignores, and the READY after it go as for any job. A handler reports
// how far its job has come with Job.Progress: PROGRESS messages, at most
// 10 a second per job, none after the job's REPLY or FAIL.
//
// On ctx's end the worker offers no more slots, lets running jobs finish
// for up to Grace, then cancels their contexts, sends their results, says
// KBYE and closes.
//
// # Tracing
//
// A job whose headers carry a trace context (traceparent, tracestate:
// W3C Trace Context, as package client sends them) runs in that trace:
// its handler's ctx holds a span "process QUEUE" (kind consumer) under
// the broker's delivery, ended when the handler returns, with an error
// status for a FAIL and an event when the broker cancels the job. Spans
// go to Options.TracerProvider, by default OpenTelemetry's global one;
// without an SDK the handler's ctx still holds the job's remote span
// context, so whatever the handler traces joins the job's trace. The
// worker's log lines about a job carry its trace_id and span_id. A job
// whose trace context says "not sampled" makes no span here, whatever
// the provider's sampler: its sender decided for the whole trace.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
	"github.com/eventmq/emq/internal/reach"
	"github.com/eventmq/emq/internal/redial"
	"github.com/eventmq/emq/internal/zmtp"
)

// Queue is a queue the worker serves, with its weight (higher first).
type Queue struct {
	Name   string
	Weight int
}

// Options configure a Worker.
type Options struct {
	Broker            string        // the broker's backend, tcp://host:port; several, comma-separated: the one that answers (replicated brokers' leader)
	Queues            []Queue       // nil = each queue given to Handle, weight 10
	Concurrency       int           // jobs run at once; 0 = 1
	HeartbeatInterval time.Duration // 0 = 1s
	HeartbeatTimeout  time.Duration // broker silent this long = dial every endpoint again (1.5 intervals: the others, beside it); 0 = 3s
	Grace             time.Duration // for running jobs at stop; 0 = 30s
	Identity          string        // routing id for the worker's life; "" = a new UUID
	Logger            *slog.Logger  // nil = slog.Default()
	// Security is CURVE keys or a PLAIN user for a broker that wants
	// them (its curve-clients or plain-users list this worker with the
	// worker role); the zero value = NULL.
	Security Security
	// TracerProvider takes the spans of the jobs run (package doc:
	// Tracing); nil = OpenTelemetry's global provider.
	TracerProvider trace.TracerProvider
}

// Security is how a worker proves who it is to a broker that wants
// CURVE or PLAIN: the same type as client.Security.
type Security = reach.Security

// ErrCancelled is the cause (context.Cause) of a job's context when the
// broker cancelled the job.
var ErrCancelled = errors.New("worker: job cancelled")

// Job is one job handed to a Handler.
type Job struct {
	MsgID   string // the client's msgid: the same on every attempt
	Queue   string
	Headers emqp.Headers
	Payload []byte
	Attempt int // 1 the first time, 2 the first retry, ...

	progress *progress // nil in a Job made outside a Run
}

// Progress reports how far the job has come: percent from 0 to 100 (above
// 100 counts as 100, below 0 sends no number) and a short note, which may
// be "". The broker gets it as PROGRESS "40 resizing" (a note alone that
// starts with a number from 0 to 100 reads there as that percent), cut to
// emqp.MaxProgressLen bytes.
//
// Progress is safe from any goroutine and does not wait for the network.
// At most 10 reports a second go out: one made sooner waits for its turn,
// and a newer one replaces it, so the latest report arrives. Nothing goes
// once the handler has returned (a report still waiting then is dropped:
// the REPLY or FAIL tells more), nor while the worker is not connected,
// nor for a Job made outside a Run, as in a handler's tests.
func (j *Job) Progress(percent int, note string) {
	if j == nil || j.progress == nil {
		return
	}
	if text := progressText(percent, note); text != "" {
		j.progress.report(text)
	}
}

// progressText is a report in the wire's form, "40 note", "40" or "note".
func progressText(percent int, note string) string {
	text := strings.ToValidUTF8(note, "\uFFFD")
	if percent >= 0 {
		if text == "" {
			text = strconv.Itoa(min(percent, 100))
		} else {
			text = strconv.Itoa(min(percent, 100)) + " " + text
		}
	}
	if len(text) <= emqp.MaxProgressLen {
		return text
	}
	cut := emqp.MaxProgressLen
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

// Handler runs one job. It returns the REPLY's payload, or an error that
// becomes a FAIL (the broker retries the job up to its retry-count). ctx
// ends at the job's timeout, when the broker cancels the job
// (context.Cause(ctx) is then ErrCancelled), or when the worker stops for
// good.
type Handler func(ctx context.Context, job *Job) ([]byte, error)

// Worker runs jobs; configure it with Handle, then Run it once.
type Worker struct {
	routes   chan *emqp.RouteTable // where serve passes the placements its broker answers with; nil: not asked (routes.go)
	opts     Options
	sec      *zmtp.ClientSecurity
	log      *slog.Logger
	tracer   trace.Tracer
	handlers map[string]Handler
}

// New checks opts and makes a worker.
func New(opts Options) (*Worker, error) {
	if opts.Broker == "" {
		return nil, errors.New("worker: Options.Broker is required (tcp://host:port)")
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("worker: Concurrency must not be negative, not %d", opts.Concurrency)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = time.Second
	}
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = 3 * time.Second // the last resort: the hedge finds a paused leader's standby sooner
	}
	if opts.HeartbeatTimeout <= opts.HeartbeatInterval {
		return nil, fmt.Errorf("worker: HeartbeatTimeout %v must be longer than HeartbeatInterval %v",
			opts.HeartbeatTimeout, opts.HeartbeatInterval)
	}
	if opts.Grace <= 0 {
		opts.Grace = 30 * time.Second
	}
	if opts.Identity == "" {
		opts.Identity = emqp.NewID()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sec, err := opts.Security.Dial()
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Worker{opts: opts, sec: sec, log: opts.Logger, handlers: make(map[string]Handler),
		tracer: tp.Tracer(jobtrace.ScopeName)}, nil
}

// unsetGlobal is OpenTelemetry's global tracer provider as it starts,
// which makes no spans until a program sets one: while it is still the
// global one, a job pays for no span.
var unsetGlobal = otel.GetTracerProvider()

// spans reports whether jobs get spans here: a provider was given, or a
// program set OpenTelemetry's global one.
func (w *Worker) spans() bool {
	return w.opts.TracerProvider != nil || otel.GetTracerProvider() != unsetGlobal
}

// Handle sets the handler of a queue. The queue "*" catches the jobs of
// every queue that has no handler of its own.
func (w *Worker) Handle(queue string, h Handler) {
	w.handlers[queue] = h
}

func (w *Worker) queues() []emqp.Queue {
	var qs []emqp.Queue
	if len(w.opts.Queues) > 0 {
		for _, q := range w.opts.Queues {
			qs = append(qs, emqp.Queue{Weight: q.Weight, Name: q.Name})
		}
		return qs
	}
	for name := range w.handlers {
		if name != "*" {
			qs = append(qs, emqp.Queue{Weight: emqp.DefaultWeight, Name: name})
		}
	}
	return qs
}

// result is a finished job's answer.
type result struct {
	msgid string
	msg   emqp.Message // REPLY or FAIL
}

// task is a job running here.
type task struct {
	cancel   context.CancelCauseFunc
	progress *progress
	span     trace.Span // its process span (non-recording when not sampled)
}

// report is a PROGRESS on its way to the run loop, with the job it is from.
type report struct {
	from *progress
	msg  *emqp.Progress
}

// progressGap is the least time between two PROGRESS of one job: at most
// 10 a second.
const progressGap = 100 * time.Millisecond

// progress holds a job's reports until they go to the run loop: one at
// once when its turn has come, else when it comes (a newer report
// replacing it meanwhile).
type progress struct {
	msgid string
	out   chan<- report

	mu      sync.Mutex
	text    string // the report that waits, when waiting
	waiting bool
	timer   *time.Timer // set while a report waits for its turn
	next    time.Time   // the next turn
	ended   bool        // the handler returned: no more reports
}

func (p *progress) report(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.text, p.waiting = text, true
	if p.timer == nil {
		p.tryLocked()
	}
}

// tryLocked hands the waiting report to the run loop if its turn has
// come, or sets the timer for its turn. The caller holds mu.
func (p *progress) tryLocked() {
	now := time.Now()
	if wait := p.next.Sub(now); wait > 0 {
		p.timer = time.AfterFunc(wait, p.turn)
		return
	}
	select {
	case p.out <- report{p, &emqp.Progress{MsgID: emqp.NewID(), OrigMsgID: p.msgid, Text: p.text}}:
		p.text, p.waiting, p.next = "", false, now.Add(progressGap)
	default: // the run loop is behind: the report waits for the next turn
		p.timer = time.AfterFunc(progressGap, p.turn)
	}
}

func (p *progress) turn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	if p.waiting && !p.ended {
		p.tryLocked()
	}
}

// end drops what waits and refuses what comes.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended, p.waiting = true, false
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// session is one connection to the broker.
type session struct {
	conn  *zmtp.Conn
	msgs  chan emqp.Message // closed when the connection is lost
	hedge *zmtp.Hedge       // dials the other endpoints while the broker is silent
}

// run is the state of one Run.
type run struct {
	*Worker
	sess     *session
	running  map[string]*task
	results  chan result
	reports  chan report    // PROGRESS, sent only while their job runs here
	unsent   []emqp.Message // REPLY/FAIL waiting for a connection
	jobsCtx  context.Context
	lastSeen time.Time // of the broker
}

// Run serves jobs until ctx ends, then stops gracefully. It returns nil
// after a graceful stop.
func (w *Worker) Run(ctx context.Context) error {
	if len(w.handlers) == 0 {
		return errors.New("worker: no handler; call Handle first")
	}
	if len(w.queues()) == 0 {
		return errors.New("worker: no queue to serve: name one in Options.Queues or Handle")
	}
	for _, q := range w.queues() {
		if !emqp.ValidQueueName(q.Name) {
			return fmt.Errorf("worker: queue %s: a queue name is 1 to %d bytes of UTF-8", emqp.QuoteName(q.Name), emqp.MaxQueueLen)
		}
	}
	if w.handlers["*"] == nil {
		for _, q := range w.queues() {
			if w.handlers[q.Name] == nil {
				return fmt.Errorf("worker: queue %q has no handler; call Handle(%q, ...) or Handle(\"*\", ...)", q.Name, q.Name)
			}
		}
	}
	return w.routed(ctx)
}

// serve serves the worker's queues at its broker until ctx ends, then
// stops gracefully.
func (w *Worker) serve(ctx context.Context) error {
	jobsCtx, cancelJobs := context.WithCancel(context.Background())
	defer cancelJobs()
	r := &run{
		Worker:  w,
		running: make(map[string]*task),
		results: make(chan result, w.opts.Concurrency),
		reports: make(chan report, 2*w.opts.Concurrency+16),
		jobsCtx: jobsCtx,
	}
	// Silence is checked four times an interval, so a silent broker is
	// left within a quarter of an interval past HeartbeatTimeout.
	tick := time.NewTicker(w.opts.HeartbeatInterval / 4)
	defer tick.Stop()
	var beat time.Time  // the last HEARTBEAT sent
	asked := time.Now() // the last ROUTES sent
	dialTimer := time.NewTimer(0)
	defer dialTimer.Stop()
	backoff := redial.New(zmtp.MaxRedial(w.opts.Broker))
	stop := ctx.Done()
	var grace, giveUp <-chan time.Time
	stopping := false

	for !stopping || len(r.running) > 0 {
		var msgs chan emqp.Message
		var won <-chan *zmtp.Conn
		if r.sess != nil {
			msgs, won = r.sess.msgs, r.sess.hedge.Won()
		}
		select {
		case <-dialTimer.C:
			if r.sess != nil {
				continue
			}
			if err := r.connect(stopping); err != nil {
				w.log.Warn("worker: cannot reach the broker", "broker", w.opts.Broker, "err", err)
				dialTimer.Reset(backoff.Next())
				continue
			}
			backoff.Reset()
		case m, ok := <-msgs:
			if !ok {
				w.log.Warn("worker: connection to the broker lost; reconnecting", "broker", w.opts.Broker)
				r.disconnect(dialTimer, backoff.Delay())
				continue
			}
			r.lastSeen = time.Now()
			switch m := m.(type) {
			case *emqp.Request:
				if stopping {
					continue // not taken: the broker requeues it after our KBYE
				}
				r.start(m)
			case *emqp.Cancel:
				r.cancel(m.OrigMsgID)
			case *emqp.Routes:
				if t, err := emqp.ParseRouteTable(m.Table); err == nil && w.routes != nil {
					select {
					case w.routes <- t:
					default: // the last one is still waiting: a newer comes later
					}
				}
			case *emqp.Kbye, *emqp.Disconnect:
				w.log.Info("worker: the broker said goodbye; reconnecting", "broker", w.opts.Broker)
				r.disconnect(dialTimer, backoff.Delay())
			}
		case conn := <-won:
			w.log.Warn("worker: another broker serves while this one is silent; switching to it",
				"from", r.sess.conn.Endpoint(), "to", conn.Endpoint(), "silent_for", time.Since(r.lastSeen).Round(time.Millisecond))
			r.drop()
			r.adopt(conn, stopping)
			backoff.Reset()
		case res := <-r.results:
			// Every finished job's answer goes in one write; yield first so
			// that jobs finishing right now join it.
			runtime.Gosched()
			for more := true; more; {
				delete(r.running, res.msgid)
				r.unsent = append(r.unsent, res.msg)
				select {
				case res = <-r.results:
				default:
					more = false
				}
			}
			r.flush(!stopping)
		case rep := <-r.reports:
			// A job's result removes it from running: no PROGRESS follows
			// its REPLY or FAIL.
			if t := r.running[rep.msg.OrigMsgID]; t != nil && t.progress == rep.from {
				r.send(rep.msg)
			}
		case now := <-tick.C:
			if r.sess == nil {
				continue
			}
			silent := now.Sub(r.lastSeen)
			if silent > w.opts.HeartbeatTimeout {
				w.log.Warn("worker: the broker is silent; reconnecting", "broker", w.opts.Broker,
					"silent_for", silent.Round(time.Millisecond))
				r.disconnect(dialTimer, 0)
				continue
			}
			// The broker's HEARTBEAT comes every interval: silence past 1.5
			// intervals is one missed.
			if silent >= w.opts.HeartbeatInterval*3/2 {
				r.sess.hedge.Try()
			} else {
				r.sess.hedge.Calm()
			}
			if w.routes != nil && now.Sub(asked) >= routesEvery {
				asked = now
				r.send(&emqp.Routes{MsgID: emqp.NewID()})
			}
			if now.Sub(beat) >= w.opts.HeartbeatInterval-w.opts.HeartbeatInterval/8 {
				beat = now
				r.send(&emqp.Heartbeat{MsgID: emqp.NewID(), Time: strconv.FormatInt(now.Unix(), 10)})
			}
		case <-stop:
			stop, stopping = nil, true
			grace = time.After(w.opts.Grace)
			w.log.Info("worker: stopping; no more jobs taken", "running", len(r.running))
		case <-grace:
			w.log.Warn("worker: grace period over; cancelling running jobs", "running", len(r.running))
			cancelJobs()
			giveUp = time.After(5 * time.Second)
		case <-giveUp:
			w.log.Error("worker: jobs did not return after cancel; leaving them to the broker", "running", len(r.running))
			for _, t := range r.running {
				t.progress.end()
			}
			r.running = nil
		}
	}
	if r.sess != nil {
		r.flush(false)
		r.send(&emqp.Kbye{MsgID: emqp.NewID()})
		r.drop()
	}
	return nil
}

// connect dials, INFORMs and waits for the ACK, then offers free slots and
// sends results that waited.
func (r *run) connect(stopping bool) error {
	conn, err := r.dial(context.Background(), r.opts.Broker)
	if err != nil {
		return err
	}
	r.adopt(conn, stopping)
	return nil
}

// dial connects to the first of endpoints that greets, INFORMs and waits
// for the ACK; it gives up when ctx ends.
func (w *Worker) dial(ctx context.Context, endpoints string) (*zmtp.Conn, error) {
	conn, err := zmtp.DialAny(ctx, endpoints, zmtp.DialOptions{
		Identity: []byte(w.opts.Identity), Timeout: w.opts.HeartbeatTimeout, Security: w.sec,
	})
	if err != nil {
		return nil, err
	}
	inform := &emqp.Inform{MsgID: emqp.NewID(), Queues: w.queues(), PeerType: emqp.PeerWorker}
	if err := conn.WriteMsgs(emqp.Encode(inform)); err != nil {
		conn.Close()
		return nil, err
	}
	giveUp := context.AfterFunc(ctx, func() { conn.Close() })
	defer giveUp()
	conn.SetReadDeadline(time.Now().Add(w.opts.HeartbeatTimeout))
	bad := func(err error) { w.log.Warn("worker: undecodable message from the broker", "err", err) }
	for {
		m, err := emqp.ReadMessage(conn.ReadMsg, bad)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("no ACK for INFORM: %w", err)
		}
		if a, ok := m.(*emqp.Ack); ok && a.AckedID == inform.MsgID {
			break
		}
		if e, ok := m.(*emqp.Error); ok && e.RefMsgID == inform.MsgID {
			conn.Close()
			return nil, fmt.Errorf("INFORM refused: %s: %s", e.Code, e.Text)
		}
	}
	if !giveUp() { // ctx ended: conn is closed
		return nil, ctx.Err()
	}
	conn.SetReadDeadline(time.Time{})
	return conn, nil
}

// adopt makes conn, INFORMed and ACKed, the session: it reads from it,
// sends the results that waited, and offers the free slots.
func (r *run) adopt(conn *zmtp.Conn, stopping bool) {
	s := &session{conn: conn, msgs: make(chan emqp.Message, 2*r.opts.Concurrency+16),
		hedge: zmtp.NewHedge(r.opts.Broker, conn.Endpoint(), r.dial)}
	bad := func(err error) { r.log.Warn("worker: undecodable message from the broker", "err", err) }
	go func() {
		defer close(s.msgs)
		for {
			m, err := emqp.ReadMessage(conn.ReadMsg, bad)
			if err != nil {
				return
			}
			s.msgs <- m
		}
	}()
	r.sess, r.lastSeen = s, time.Now()
	r.log.Info("worker: connected", "broker", conn.Endpoint(), "queues", queueNames(r.queues()),
		"concurrency", r.opts.Concurrency)
	r.flush(false)
	if !stopping {
		for range r.opts.Concurrency - len(r.running) {
			r.send(&emqp.Ready{MsgID: emqp.NewID()})
		}
	}
}

func queueNames(qs []emqp.Queue) string {
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	return strings.Join(names, ",")
}

// disconnect drops the session and sets dialTimer for a new connection.
func (r *run) disconnect(dialTimer *time.Timer, after time.Duration) {
	r.drop()
	dialTimer.Reset(after)
}

// drop closes the session.
func (r *run) drop() {
	r.sess.hedge.Stop()
	r.sess.conn.Close()
	for range r.sess.msgs { // the reader ends with the connection
	}
	r.sess = nil
}

// send writes one message on the session, if there is one.
func (r *run) send(m emqp.Message) {
	if r.sess != nil {
		_ = r.sess.conn.WriteMsgs(emqp.Encode(m)) // a broken connection shows in the reader
	}
}

// flush writes the results that wait, each with a READY when ready is set.
func (r *run) flush(ready bool) {
	if r.sess == nil || len(r.unsent) == 0 {
		return
	}
	var msgs [][][]byte
	for _, m := range r.unsent {
		msgs = append(msgs, emqp.Encode(m))
		if ready {
			msgs = append(msgs, emqp.Encode(&emqp.Ready{MsgID: emqp.NewID()}))
		}
	}
	if err := r.sess.conn.WriteMsgs(msgs...); err != nil {
		return // kept; sent again after the reconnect
	}
	r.unsent = r.unsent[:0]
}

// start runs a job in its own goroutine.
func (r *run) start(req *emqp.Request) {
	if _, dup := r.running[req.MsgID]; dup {
		return // a resent REQUEST for a job running here
	}
	if len(r.running) >= r.opts.Concurrency {
		// The broker sent more than we offered; refuse it, it is retried.
		r.send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: req.MsgID, Reason: "worker has no free slot"})
		return
	}
	h := r.handlers[req.Queue]
	if h == nil {
		h = r.handlers["*"]
	}
	job := &Job{MsgID: req.MsgID, Queue: req.Queue, Headers: req.Headers, Payload: req.Payload, Attempt: 1}
	if v, ok := req.Headers.Get("attempt"); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			job.Attempt = n
		}
	}
	// One context per job, that a CANCEL ends with its cause, and for a
	// timeout a second under it, whose Err says DeadlineExceeded. Both
	// are released when the handler returns: neither stays registered
	// with jobsCtx until Run ends.
	jobCtx, cancel := context.WithCancelCause(r.jobsCtx)
	ctx, stopTimeout := jobCtx, context.CancelFunc(func() {})
	if d, err := req.Headers.Timeout(); err == nil && d > 0 {
		ctx, stopTimeout = context.WithTimeout(jobCtx, d)
	}
	ctx = jobtrace.Extract(ctx, req.Headers)
	span := trace.SpanFromContext(ctx) // a job whose sender did not sample it: no span here either
	if sc := span.SpanContext(); r.spans() && (!sc.IsValid() || sc.IsSampled()) {
		ctx, span = r.tracer.Start(ctx, jobtrace.SpanName(jobtrace.OpProcess, req.Queue), trace.WithSpanKind(trace.SpanKindConsumer))
	}
	if span.IsRecording() {
		span.SetAttributes(jobtrace.Attrs(jobtrace.OpProcess, req.Queue, req.MsgID)...)
		span.SetAttributes(jobtrace.Attempt(job.Attempt))
	}
	job.progress = &progress{msgid: req.MsgID, out: r.reports}
	r.running[req.MsgID] = &task{cancel: cancel, progress: job.progress, span: span}
	go func() {
		defer cancel(nil)
		defer stopTimeout()
		m := call(ctx, h, job)
		job.progress.end() // before the REPLY or FAIL
		r.ended(span, job, m)
		r.results <- result{req.MsgID, m}
	}()
}

// ended closes a job's span with its outcome, and logs a FAIL.
func (r *run) ended(span trace.Span, job *Job, m emqp.Message) {
	if f, ok := m.(*emqp.Fail); ok {
		if span.IsRecording() {
			span.SetStatus(codes.Error, f.Reason)
		}
		r.log.Info("worker: job failed; the broker retries it while it has attempts left",
			append([]any{"msgid", job.MsgID, "queue", job.Queue, "attempt", job.Attempt, "reason", f.Reason},
				jobtrace.LogAttrs(span.SpanContext())...)...)
	}
	span.End()
}

// cancel ends the context of a job the broker cancelled. The CANCEL is not
// answered.
func (r *run) cancel(msgid string) {
	t := r.running[msgid]
	if t == nil {
		r.log.Debug("worker: CANCEL for a job not running here", "msgid", msgid)
		return
	}
	t.span.AddEvent("cancelled by the broker")
	r.log.Info("worker: the broker cancelled a job; ending its context",
		append([]any{"msgid", msgid}, jobtrace.LogAttrs(t.span.SpanContext())...)...)
	t.cancel(ErrCancelled)
}

// call runs a handler and turns its outcome into a REPLY or a FAIL.
func call(ctx context.Context, h Handler, job *Job) (m emqp.Message) {
	defer func() {
		if p := recover(); p != nil {
			m = &emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: job.MsgID, Reason: fmt.Sprintf("panic: %v", p)}
		}
	}()
	if h == nil {
		return &emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: job.MsgID, Reason: "no handler for queue " + job.Queue}
	}
	out, err := h(ctx, job)
	if err != nil {
		reason := err.Error()
		if errors.Is(context.Cause(ctx), ErrCancelled) && !errors.Is(err, ErrCancelled) {
			reason = ErrCancelled.Error() + ": " + reason
		}
		return &emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: job.MsgID, Reason: truncate(reason, 4096)}
	}
	return &emqp.Reply{MsgID: emqp.NewID(), Payload: out, OrigMsgID: job.MsgID}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
