// Package client sends jobs to an EMQ broker (EventMQ's "sender").
//
//	c, err := client.New(client.Options{Broker: "tcp://127.0.0.1:47290"})
//	...
//	defer c.Close()
//	msgid, err := c.Send(ctx, "email", payload, client.Timeout(30*time.Second))
//
// Send returns once the broker has ACKed the job, that is, once the job is
// in the broker's journal. Request also waits for the worker's REPLY.
//
// # Reliability
//
// One connection carries every call, with many REQUESTs in flight. The
// client trusts only ACKs: a REQUEST that is not ACKed within ResendAfter,
// or that was in flight when the connection broke, is sent again with the
// same msgid until its context ends; the broker stores a msgid once, so a
// resend never makes a second job. A broken connection (read error, or a
// peer that closed it) is replaced by a new one, with the same routing id,
// so the broker's REPLY for an earlier Request still finds this client.
//
// A broker that stays connected but says nothing (a paused or frozen
// process, a network that drops what it carries) is hedged against, then
// left. While a call waits for its ACK and the broker has sent nothing
// for HeartbeatInterval, the client dials the other endpoints beside its
// connection, one attempt at a time (50 ms after a failed one, then
// twice as long, up to 500 ms). Only a serving broker listens on a
// group's eMQP ports (a standby binds them when it takes over), so a
// broker that greets there is the new leader: the client switches to it
// at once and resends there what is not ACKed, with the same msgids. A
// broker that is only slow keeps its clients, and with one endpoint
// nothing is dialled. The last resort stays: while a call waits the
// client sends a ZMTP PING every HeartbeatInterval, and when neither an
// answer nor any message has come for HeartbeatTimeout it drops the
// connection and dials every endpoint again. The PING is below eMQP,
// answered by the broker's transport: no eMQP peer sees it (an eMQP
// HEARTBEAT from a peer that has not INFORMed gets no answer, which
// original EventMQ peers rely on). A client connecting takes the first
// endpoint that greets; while one has accepted the TCP connection and
// says nothing (a paused process's kernel accepts), those that refused
// are dialled again at the same pace. With a group's --leader-ttl of 2 s
// a paused leader costs its clients about the TTL, by when its standby
// serves (docs/benchmarks.md: the longest gap between ACKs with the
// leader SIGSTOPped 6 s). Subscriber and package worker hedge the same
// way.
//
// An original EventMQ sender (0.3's send_request, in
// eventmq/client/messages.py) writes the REQUEST once, with zmq.NOBLOCK,
// on a DEALER connected to one address (eventmq/sender.py), and returns
// its msgid:
// it never reads the ACK, never resends, and sets no ZMTP heartbeat. A
// paused broker does not hold the call: the REQUEST waits in the
// kernel's buffers of the connection, or in libzmq's queue, until the
// broker resumes (a new socket, as its Job decorator makes for each
// call, waits for a handshake; libzmq gives that up after 30 s and
// connects again). It never learns of a takeover: it reaches the next
// leader only behind an address that moves to it (the README's floating
// address), and what waited on the old connection is never stored: the
// old leader, fenced when it resumes, cannot commit it, and the sender
// does not send it again. When libzmq's queue is full (its send
// high-water mark, 1000 messages by default), the send raises
// zmq.Again, which EventMQ's send_multipart (eventmq/utils/classes.py)
// swallows: the job is dropped and a msgid returned all the same.
//
// An ERROR from the broker ends the call with a *BrokerError, except
// ERROR unavailable (the broker is stopping, or its disk is full), which is
// retried like a missing ACK until the context ends.
//
// # Tracing
//
// Send and Request take part in the caller's OpenTelemetry trace: each
// makes a span "publish QUEUE" (kind producer, until the ACK) under the
// span of ctx, and sends its trace context in the job's headers
// traceparent and tracestate (W3C Trace Context), where the broker and
// the worker pick it up. Spans go to Options.TracerProvider, by default
// OpenTelemetry's global one (which drops them until the program sets
// an SDK); the headers are sent whenever ctx holds a valid span context,
// whatever the provider. Schedules carry no trace: each of their jobs
// is a trace of its own.
package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
	"github.com/eventmq/emq/internal/redial"
	"github.com/eventmq/emq/internal/zmtp"
)

// Options configure a Client.
type Options struct {
	Broker      string        // the broker's frontend, tcp://host:port; several, comma-separated: the one that answers (replicated brokers' leader)
	Identity    string        // routing id, kept for the client's life; "" = a new UUID
	ResendAfter time.Duration // resend a REQUEST not ACKed this long; 0 = 5s
	DialTimeout time.Duration // for one connection attempt; 0 = 5s
	// While a call waits for its ACK: the other endpoints dialled once the
	// broker has said nothing for HeartbeatInterval (0 = 1s), a PING
	// every HeartbeatInterval, and a broker silent for HeartbeatTimeout
	// (0 = 3s) left (package doc: Reliability).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	Logger            *slog.Logger // nil = slog.Default()
	Security          Security     // CURVE or PLAIN; the zero value = NULL
	// TracerProvider takes the spans of Send and Request (package doc:
	// Tracing); nil = OpenTelemetry's global provider.
	TracerProvider trace.TracerProvider
	// OnDialError, if set, is called with the error of each failed
	// attempt to connect until the client first connects (emq send gives
	// up at once when nothing listens); the client dials on regardless.
	OnDialError func(error)
}

// BrokerError is the broker's refusal of a request (an ERROR message).
// errors.Is matches ErrDuplicate, ErrNotFound and ErrConflict by its code.
type BrokerError struct {
	Code string // emqp.Code*: bad_request, queue_full, ...
	Text string
	// Holder is, for ErrDuplicate, the msgid of the job that holds the
	// unique key.
	Holder string
}

func (e *BrokerError) Error() string { return "broker refused the job: " + e.Code + ": " + e.Text }

// Is matches the sentinel of the error's code.
func (e *BrokerError) Is(target error) bool {
	switch target {
	case ErrDuplicate:
		return e.Code == emqp.CodeDuplicate
	case ErrNotFound:
		return e.Code == emqp.CodeNotFound
	case ErrConflict:
		return e.Code == emqp.CodeConflict
	}
	return false
}

// Refusals a caller may want to tell apart (errors.Is on a BrokerError).
var (
	// ErrDuplicate: another job of the queue holds the unique key (Unique);
	// the BrokerError's Holder is its msgid. Nothing was stored.
	ErrDuplicate = errors.New("client: another job holds the unique key")
	// ErrNotFound: Cancel of a job the broker does not have.
	ErrNotFound = errors.New("client: no such job")
	// ErrConflict: Cancel of a job that is done, dead or cancelled already.
	ErrConflict = errors.New("client: the job is done, dead or cancelled already")
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("client: closed")

// Client sends jobs. It is safe for concurrent use.
type Client struct {
	opts   Options
	log    *slog.Logger
	sec    *zmtp.ClientSecurity
	tracer trace.Tracer
	shards *shards // routing by queue over shards (routes.go); nil on another shard's connection

	pubMu   sync.RWMutex // Publish queues under it; Close closes under it
	mu      sync.Mutex
	calls   map[string]*call // by msgid, until ACKed (and REPLYed, for Request)
	conn    *zmtp.Conn       // nil while connecting
	dialErr error            // of the last connection attempt
	closed  bool
	outq    chan *call // to the writer
	done    chan struct{}
	ending  chan struct{} // Close: the writer writes what is queued, then stops
	written chan struct{} // closed when the writer stops
	wg      sync.WaitGroup
}

type call struct {
	frames    [][]byte
	publish   bool      // a PUBLISH: written once, never resent, not answered
	sentAt    time.Time // zero = not on the current connection
	wantReply bool
	acked     chan struct{} // closed by the ACK
	reply     chan []byte   // the REPLY's payload
	failed    chan error    // a BrokerError
	lastErr   error         // the last ERROR unavailable
	ackOnce   sync.Once
}

// New starts a client; it connects in the background and keeps a
// connection until Close.
func New(opts Options) (*Client, error) {
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	c.shards = &shards{seed: c, links: map[string]*Client{}}
	return c, nil
}

// newClient starts one connection's client, routing nothing.
func newClient(opts Options) (*Client, error) {
	if opts.Broker == "" {
		return nil, errors.New("client: Options.Broker is required (tcp://host:port)")
	}
	if opts.Identity == "" {
		opts.Identity = emqp.NewID()
	}
	if opts.ResendAfter <= 0 {
		opts.ResendAfter = 5 * time.Second
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if err := heartbeats(&opts.HeartbeatInterval, &opts.HeartbeatTimeout); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sec, err := opts.Security.Dial()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	c := &Client{
		opts:    opts,
		log:     opts.Logger,
		sec:     sec,
		tracer:  tp.Tracer(jobtrace.ScopeName),
		calls:   make(map[string]*call),
		outq:    make(chan *call, 1024),
		done:    make(chan struct{}),
		ending:  make(chan struct{}),
		written: make(chan struct{}),
	}
	c.wg.Add(2)
	go c.run()
	go c.writeLoop()
	return c, nil
}

// Option changes one job's headers or msgid.
type Option func(*sendOptions)

type sendOptions struct {
	headers emqp.Headers
	msgid   string
	onAck   func()
	queue   string     // of a REQUEST, which is traced
	size    int        // its payload's
	span    trace.Span // its publish span until the ACK
}

// Header sets a header item; value "" makes it a flag.
func Header(name, value string) Option {
	return func(o *sendOptions) { o.headers = o.headers.Set(name, value) }
}

// Timeout is the job's timeout:N, in whole seconds (rounded up).
func Timeout(d time.Duration) Option { return Header(emqp.HeaderTimeout, seconds(d)) }

// Delay makes the job wait before it is dispatched (delay:N seconds).
func Delay(d time.Duration) Option { return Header(emqp.HeaderDelay, seconds(d)) }

// RetryCount is how many times the job is retried after it fails.
func RetryCount(n int) Option { return Header(emqp.HeaderRetryCount, strconv.Itoa(n)) }

// OnAck calls fn when the broker has ACKed the job, for a Request that
// goes on to wait for the REPLY.
func OnAck(fn func()) Option { return func(o *sendOptions) { o.onAck = fn } }

// MsgID sends the job with this msgid instead of a new one: sending the same
// msgid twice stores one job.
func MsgID(id string) Option { return func(o *sendOptions) { o.msgid = id } }

// Priority runs the job before the queue's jobs of a higher number:
// 0 to 65535, 1024 without it (emqp.DefaultPriority).
func Priority(n uint16) Option { return Header(emqp.HeaderPriority, strconv.Itoa(int(n))) }

// Unique stores the job only if no other job of its queue holds key: one
// pending, delayed or in flight, or done less than hold ago (0: the key
// is let go when the job is done). Otherwise Send fails with ErrDuplicate
// naming the holder. A job that dies or is cancelled lets its key go.
func Unique(key string, hold time.Duration) Option {
	return func(o *sendOptions) {
		o.headers = o.headers.Set(emqp.HeaderUnique, key)
		if hold > 0 {
			o.headers = o.headers.Set(emqp.HeaderUniqueFor, seconds(hold))
		}
	}
}

// After makes the job wait until every job msgids names is done (header
// after): it is stored and ACKed at once, and runs once the last of them
// has replied. Each must be stored when the job is sent (or done and
// kept): else Send fails with a BrokerError bad_request. If one dies or
// is cancelled, the job is cancelled too, unless AfterFailed(true).
func After(msgids ...string) Option {
	return Header(emqp.HeaderAfter, strings.Join(msgids, ";"))
}

// AfterBatch makes the job wait until the batch name is complete (header
// after-batch): closed, with none of its jobs waiting or pending.
func AfterBatch(name string) Option { return Header(emqp.HeaderAfterBatch, name) }

// AfterFailed says what a job made to wait (After, AfterBatch) does when
// one of the jobs it waits for dies or is cancelled: run anyway (true),
// or be cancelled too (false, the default).
func AfterFailed(run bool) Option {
	if run {
		return Header(emqp.HeaderAfterFailed, "run")
	}
	return Header(emqp.HeaderAfterFailed, "cancel")
}

// Batch puts the job in the batch name (header batch). With open, the
// batch stays open after it (header batch-open): more jobs may join, and
// it completes only once closed (emq batches close, the admin API).
// Without, a batch never opened completes as soon as its jobs are done.
func Batch(name string, open bool) Option {
	return func(o *sendOptions) {
		o.headers = o.headers.Set(emqp.HeaderBatch, name)
		if open {
			o.headers = o.headers.Set(emqp.HeaderBatchOpen, "")
		}
	}
}

func seconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// Send enqueues a job and returns its msgid once the broker has stored it.
func (c *Client) Send(ctx context.Context, queue string, payload []byte, opts ...Option) (string, error) {
	id, _, err := c.request(ctx, queue, payload, false, opts)
	return id, err
}

// Request enqueues a job and waits for its worker's REPLY.
func (c *Client) Request(ctx context.Context, queue string, payload []byte, opts ...Option) ([]byte, error) {
	_, reply, err := c.request(ctx, queue, payload, true, opts)
	return reply, err
}

// When is when a schedule's job is made: Every or At.
type When struct {
	interval int
	cron     string
}

// Every makes a schedule's job every d, rounded up to whole seconds (at
// least one).
func Every(d time.Duration) When {
	return When{interval: int((d + time.Second - 1) / time.Second)}
}

// At makes a schedule's job at the times of a cron expression: 5 fields
// (minute hour day-of-month month day-of-week) or a descriptor such as
// @hourly, in UTC unless TZ says otherwise.
func At(cron string) When { return When{interval: emqp.CronInterval, cron: cron} }

// NoHaste holds a schedule's first job until its first due time (without
// it, the first job is made at once).
func NoHaste() Option { return Header(emqp.HeaderNoHaste, "") }

// RunCount ends a schedule after n jobs.
func RunCount(n int) Option { return Header(emqp.HeaderRunCount, strconv.Itoa(n)) }

// TZ is the time zone (Area/City) of a schedule's cron expression.
func TZ(zone string) Option { return Header(emqp.HeaderTZ, zone) }

// ScheduleID names a schedule; without it the broker names it by its
// payload (as EventMQ does) and queue.
func ScheduleID(name string) Option { return Header(emqp.HeaderScheduleID, name) }

// Schedule asks the broker to keep a schedule: the job (queue, payload,
// headers) made when says, until Unschedule. It returns once the broker
// has stored the schedule. The same schedule sent again changes nothing;
// another one with the same id replaces it.
func (c *Client) Schedule(ctx context.Context, queue string, when When, payload []byte, opts ...Option) error {
	if when.cron == "" && when.interval < 1 {
		return errors.New("client: a schedule needs Every (a second or more) or At")
	}
	if err := checkQueue(queue); err != nil {
		return err
	}
	_, _, err := c.routed(ctx, queue, false, opts, func(msgid string, h emqp.Headers) emqp.Message {
		return &emqp.Schedule{MsgID: msgid, Queue: queue, Headers: h, Interval: when.interval, Payload: payload, Cron: when.cron}
	})
	return err
}

// Unschedule removes the schedule that queue, payload and options name
// (as Schedule named it); removing one that is not there is no error.
func (c *Client) Unschedule(ctx context.Context, queue string, payload []byte, opts ...Option) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	_, _, err := c.routed(ctx, queue, false, opts, func(msgid string, h emqp.Headers) emqp.Message {
		return &emqp.Unschedule{MsgID: msgid, Queue: queue, Headers: h, Interval: emqp.CronInterval, Payload: payload}
	})
	return err
}

// Cancel cancels the job msgid: it is taken out of its queue, or, if a
// worker is running it, the worker is told to stop and whatever it
// answers is ignored. It returns once the broker has the change:
// ErrNotFound when it has no such job, ErrConflict when the job is done,
// dead or cancelled already.
func (c *Client) Cancel(ctx context.Context, msgid string) error {
	if msgid == "" || len(msgid) > emqp.MaxIDLen {
		return fmt.Errorf("client: msgid must be 1 to %d bytes", emqp.MaxIDLen)
	}
	cancel := func(l *Client) error {
		_, _, err := l.do(ctx, false, nil, func(id string, _ emqp.Headers) emqp.Message {
			return &emqp.Cancel{MsgID: id, OrigMsgID: msgid}
		})
		return err
	}
	if c.shards == nil {
		return cancel(c)
	}
	// The job is on one shard, which one is not known: ask each in turn.
	var err error
	c.shards.once.Do(func() { c.shards.fetch(ctx, c) })
	for _, l := range c.shards.everyShard() {
		if err = cancel(l); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return err
}

func (c *Client) request(ctx context.Context, queue string, payload []byte, wantReply bool, opts []Option) (string, []byte, error) {
	if err := checkQueue(queue); err != nil {
		return "", nil, err
	}
	opts = append(opts, func(o *sendOptions) { o.queue, o.size = queue, len(payload) })
	return c.routed(ctx, queue, wantReply, opts, func(msgid string, h emqp.Headers) emqp.Message {
		return &emqp.Request{MsgID: msgid, Queue: queue, Headers: h, Payload: payload}
	})
}

var producer = trace.WithSpanKind(trace.SpanKindProducer)

// unsetGlobal is OpenTelemetry's global tracer provider as it starts,
// which makes no spans until a program sets one: while it is still the
// global one, a Send pays for no span.
var unsetGlobal = otel.GetTracerProvider()

// publishSpan starts the span of a REQUEST, until its ACK (o.span), and
// puts its trace context in the headers.
func (c *Client) publishSpan(ctx context.Context, o *sendOptions) {
	if c.opts.TracerProvider == nil && otel.GetTracerProvider() == unsetGlobal {
		// No SDK anywhere: no span to make, the caller's context to pass.
		o.headers = jobtrace.Inject(ctx, o.headers)
		return
	}
	_, o.span = c.tracer.Start(ctx, jobtrace.SpanName(jobtrace.OpPublish, o.queue), producer)
	if o.span.IsRecording() {
		o.span.SetAttributes(append(jobtrace.Attrs(jobtrace.OpPublish, o.queue, o.msgid), semconv.MessagingMessageBodySize(o.size))...)
	}
	o.headers = jobtrace.WithSpanContext(o.headers, o.span.SpanContext())
}

// endSpan ends a REQUEST's span, if it is still open, with err.
func (o *sendOptions) endSpan(err error) {
	if o.span == nil {
		return
	}
	if err != nil && o.span.IsRecording() {
		o.span.RecordError(err)
		o.span.SetStatus(codes.Error, err.Error())
	}
	o.span.End()
	o.span = nil
}

// checkQueue refuses a queue name the broker would refuse for sure.
func checkQueue(queue string) error {
	if queue == "" || len(queue) > emqp.MaxQueueLen || !utf8.ValidString(queue) {
		return fmt.Errorf("client: queue name %s must be 1 to %d bytes of UTF-8", emqp.QuoteName(queue), emqp.MaxQueueLen)
	}
	return nil
}

// do sends the message msg makes and waits for its ACK (and, with
// wantReply, the REPLY).
func (c *Client) do(ctx context.Context, wantReply bool, opts []Option, msg func(msgid string, h emqp.Headers) emqp.Message) (string, []byte, error) {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if wantReply {
		o.headers = o.headers.Set(emqp.HeaderReplyRequested, "")
	}
	if o.msgid == "" {
		o.msgid = emqp.NewID()
	}
	// Refused here what the broker would refuse for sure (and the callers
	// a bad queue name: checkQueue); anything else it answers with an
	// ERROR, which becomes a BrokerError.
	if len(o.msgid) > emqp.MaxIDLen {
		return "", nil, fmt.Errorf("client: msgid is %d bytes, over %d", len(o.msgid), emqp.MaxIDLen)
	}
	if o.queue != "" {
		c.publishSpan(ctx, &o)
	}
	id, reply, err := c.call(ctx, wantReply, &o, msg)
	o.endSpan(err)
	return id, reply, err
}

// call sends the message and waits for its answers; a REQUEST's span
// ends at the ACK.
func (c *Client) call(ctx context.Context, wantReply bool, o *sendOptions, msg func(msgid string, h emqp.Headers) emqp.Message) (string, []byte, error) {
	cl := &call{
		frames:    emqp.Encode(msg(o.msgid, o.headers)),
		wantReply: wantReply,
		acked:     make(chan struct{}),
		reply:     make(chan []byte, 1),
		failed:    make(chan error, 1),
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return "", nil, ErrClosed
	}
	if c.calls[o.msgid] != nil {
		c.mu.Unlock()
		return "", nil, fmt.Errorf("client: msgid %s is already in flight", o.msgid)
	}
	c.calls[o.msgid] = cl
	c.mu.Unlock()
	defer c.forget(o.msgid)
	select {
	case c.outq <- cl:
	case <-ctx.Done():
		return o.msgid, nil, c.ctxErr(ctx, cl, "ACK")
	case <-c.done:
		return o.msgid, nil, ErrClosed
	}

	select {
	case <-cl.acked:
	case err := <-cl.failed:
		return o.msgid, nil, err
	case <-ctx.Done():
		return o.msgid, nil, c.ctxErr(ctx, cl, "ACK")
	case <-c.done:
		return o.msgid, nil, ErrClosed
	}
	o.endSpan(nil)
	if o.onAck != nil {
		o.onAck()
	}
	if !wantReply {
		return o.msgid, nil, nil
	}
	select {
	case r := <-cl.reply:
		return o.msgid, r, nil
	case <-ctx.Done():
		return o.msgid, nil, fmt.Errorf("client: job %s is stored, but no REPLY came: %w", o.msgid, ctx.Err())
	case <-c.done:
		return o.msgid, nil, ErrClosed
	}
}

func (c *Client) ctxErr(ctx context.Context, cl *call, what string) error {
	c.mu.Lock()
	last, dialErr := cl.lastErr, c.dialErr
	c.mu.Unlock()
	err := fmt.Errorf("client: no %s from the broker at %s: %w", what, c.opts.Broker, ctx.Err())
	switch {
	case last != nil:
		err = fmt.Errorf("%w (last answer: %w)", err, last)
	case dialErr != nil:
		err = fmt.Errorf("%w (cannot connect: %w; is the broker running?)", err, dialErr)
	}
	return err
}

// ErrRefused is a Send's error when the broker refused this client's
// credentials (CURVE or PLAIN) in the handshake: it will not take the
// job until they are listed.
var ErrRefused = errors.New("client: the broker refused this client's credentials")

// refuseCalls ends the calls waiting for their ACK with err: a refused
// handshake will not become a connection by waiting.
func (c *Client) refuseCalls(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.calls {
		if cl.publish || closed(cl.acked) {
			continue
		}
		select {
		case cl.failed <- fmt.Errorf("%w (%v)", ErrRefused, err):
		default:
		}
	}
}

func (c *Client) forget(msgid string) {
	c.mu.Lock()
	delete(c.calls, msgid)
	c.mu.Unlock()
}

// Publish sends a PUBLISH: the broker passes [topic, payload] to the
// subscribers of topic's prefixes. It is fire-and-forget, as in EventMQ:
// nothing is stored or acknowledged. Publish waits for a connection (within
// ctx), queues a copy of the message and returns; Close writes what is
// queued. A message queued when the connection breaks is lost; a refusal
// from the broker (ERROR) is logged.
func (c *Client) Publish(ctx context.Context, topic string, payload []byte) error {
	if len(topic) > emqp.MaxTopicLen {
		return fmt.Errorf("client: topic is %d bytes, over %d", len(topic), emqp.MaxTopicLen)
	}
	cl := &call{publish: true, frames: emqp.Encode(&emqp.Publish{MsgID: emqp.NewID(), Topic: topic, Message: bytes.Clone(payload)})}
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		c.mu.Lock()
		closed, conn := c.closed, c.conn
		c.mu.Unlock()
		if closed {
			return ErrClosed
		}
		if conn != nil {
			break
		}
		select { // not connected yet
		case <-time.After(wait):
		case <-ctx.Done():
			return c.ctxErr(ctx, cl, "connection")
		}
	}
	c.pubMu.RLock() // Close cannot pass its writer's last drain meanwhile
	defer c.pubMu.RUnlock()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	select {
	case c.outq <- cl:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops resending and closes the connection, after writing the
// PUBLISHes queued. Calls in progress return ErrClosed.
func (c *Client) Close() error {
	if c.shards != nil {
		defer c.shards.close()
	}
	c.pubMu.Lock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.pubMu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.pubMu.Unlock()
	close(c.ending)
	<-c.written
	c.mu.Lock()
	close(c.done)
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	c.wg.Wait()
	return nil
}

// writeLoop writes new REQUESTs, as many as are waiting in one write.
// What finds no connection is sent by resend once there is one.
func (c *Client) writeLoop() {
	defer c.wg.Done()
	defer close(c.written)
	var batch []*call
	var msgs [][][]byte
	for ending := false; !ending; {
		select {
		case cl := <-c.outq:
			batch = append(batch[:0], cl)
		case <-c.ending: // write what is queued, then stop
			batch, ending = batch[:0], true
		}
		runtime.Gosched() // let callers queuing now join this write
	gather:
		for len(batch) < 256 || ending {
			select {
			case cl := <-c.outq:
				batch = append(batch, cl)
			default:
				break gather
			}
		}
		msgs = msgs[:0]
		now := time.Now()
		c.mu.Lock()
		conn := c.conn
		for _, cl := range batch {
			if conn != nil && cl.sentAt.IsZero() { // not resent meanwhile
				cl.sentAt = now
				msgs = append(msgs, cl.frames)
			}
		}
		c.mu.Unlock()
		if len(msgs) > 0 {
			_ = conn.WriteMsgs(msgs...) // a failure is seen by the reader; resent then
		}
		clear(batch)
	}
}

// run keeps a connection, reads from it, and resends what is not ACKed.
func (c *Client) run() {
	defer c.wg.Done()
	backoff := redial.New(zmtp.MaxRedial(c.opts.Broker))
	var next *zmtp.Conn // a broker the hedge found serving on another endpoint
	connected := false
	for {
		conn := next
		if conn == nil {
			var err error
			conn, err = c.dial(context.Background(), c.opts.Broker)
			c.mu.Lock()
			c.dialErr = err
			c.mu.Unlock()
			if errors.Is(err, zmtp.ErrRefused) {
				c.log.Warn("client: the broker refused this client's credentials", "broker", c.opts.Broker, "err", err)
				c.refuseCalls(err)
			} else if err != nil {
				c.log.Debug("client: cannot connect to the broker", "broker", c.opts.Broker, "err", err)
			}
			if err != nil && !connected && c.opts.OnDialError != nil {
				c.opts.OnDialError(err)
			}
			if err != nil {
				if !redial.Wait(backoff.Next(), c.done) {
					return
				}
				continue
			}
		}
		backoff.Reset()
		connected = true
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			conn.Close()
			return
		}
		c.conn = conn
		c.mu.Unlock()
		c.resend(conn, true)

		lost := make(chan struct{})
		var heard atomic.Int64 // when the last message came
		heard.Store(time.Now().UnixNano())
		go func() { c.read(conn, &heard); close(lost) }()
		next = c.watch(conn, lost, &heard)
		conn.Close()
		<-lost
		c.mu.Lock()
		c.conn = nil
		c.mu.Unlock()
		if next == nil && !redial.Wait(backoff.Delay(), c.done) { // a broker that said KBYE may still accept for a moment
			return
		}
	}
}

// dial connects to the first of endpoints that greets.
func (c *Client) dial(ctx context.Context, endpoints string) (*zmtp.Conn, error) {
	return zmtp.DialAny(ctx, endpoints, zmtp.DialOptions{
		Identity: []byte(c.opts.Identity), Timeout: c.opts.DialTimeout, Security: c.sec,
	})
}

// watch resends unACKed REQUESTs every so often until the connection is
// lost or the client closed, hedges while calls wait on a silent broker,
// and leaves it after HeartbeatTimeout (see the package doc). It returns
// the connection the hedge made to a broker that serves, if it made one.
func (c *Client) watch(conn *zmtp.Conn, lost chan struct{}, heard *atomic.Int64) *zmtp.Conn {
	hedge := zmtp.NewHedge(c.opts.Broker, conn.Endpoint(), c.dial)
	defer hedge.Stop()
	tick := time.NewTicker(min(c.opts.ResendAfter/4, c.opts.HeartbeatInterval/4))
	defer tick.Stop()
	var waiting, pinged time.Time // since when calls wait; the last PING
	for {
		select {
		case now := <-tick.C:
			if !c.waiting() {
				waiting = time.Time{}
				hedge.Calm()
				break
			}
			if waiting.IsZero() {
				waiting = now
			}
			spoke := latest(waiting, time.Unix(0, heard.Load()))
			if now.Sub(spoke) >= c.opts.HeartbeatInterval {
				hedge.Try() // no eMQP answer for an interval: look at the other endpoints
			} else {
				hedge.Calm()
			}
			if silent := now.Sub(latest(spoke, conn.LastPong())); silent >= c.opts.HeartbeatTimeout {
				c.log.Warn("client: the broker is silent while jobs wait for their ACK; dialling every endpoint again",
					"broker", c.opts.Broker, "silent_for", silent.Round(time.Millisecond))
				return nil
			}
			if now.Sub(pinged) >= c.opts.HeartbeatInterval {
				pinged = now
				_ = conn.Ping() // a failure is seen by the reader
			}
			c.resend(conn, false)
		case next := <-hedge.Won():
			c.log.Warn("client: another broker serves while this one is silent; switching to it",
				"from", conn.Endpoint(), "to", next.Endpoint(),
				"silent_for", time.Since(time.Unix(0, heard.Load())).Round(time.Millisecond))
			return next
		case <-lost:
			return nil
		case <-c.done:
			return nil
		}
	}
}

// heartbeats sets the defaults of a HeartbeatInterval (1 s) and a
// HeartbeatTimeout (3 s), and checks them.
func heartbeats(interval, timeout *time.Duration) error {
	if *interval <= 0 {
		*interval = time.Second
	}
	if *timeout <= 0 {
		*timeout = 3 * time.Second
	}
	if *timeout <= *interval {
		return fmt.Errorf("client: HeartbeatTimeout %v must be longer than HeartbeatInterval %v", *timeout, *interval)
	}
	return nil
}

// waiting reports whether a call waits for its ACK.
func (c *Client) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.calls {
		if !cl.publish && !closed(cl.acked) {
			return true
		}
	}
	return false
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func latest(ts ...time.Time) time.Time {
	var last time.Time
	for _, t := range ts {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// resend writes the REQUESTs that are not ACKed: all of them on a new
// connection, else those sent more than ResendAfter ago.
func (c *Client) resend(conn *zmtp.Conn, all bool) {
	now := time.Now()
	var msgs [][][]byte
	c.mu.Lock()
	for _, cl := range c.calls {
		select {
		case <-cl.acked:
			continue
		default:
		}
		if all || now.Sub(cl.sentAt) >= c.opts.ResendAfter {
			cl.sentAt = now
			msgs = append(msgs, cl.frames)
		}
	}
	c.mu.Unlock()
	if len(msgs) > 0 {
		_ = conn.WriteMsgs(msgs...)
	}
}

// read handles the broker's answers until the connection breaks; heard
// is when the last came.
func (c *Client) read(conn *zmtp.Conn, heard *atomic.Int64) {
	bad := func(err error) { c.log.Warn("client: undecodable message from the broker", "err", err) }
	for {
		m, err := emqp.ReadMessage(conn.ReadMsg, bad)
		if err != nil {
			return
		}
		heard.Store(time.Now().UnixNano())
		c.mu.Lock()
		switch m := m.(type) {
		case *emqp.Ack:
			if cl := c.calls[m.AckedID]; cl != nil {
				cl.ackOnce.Do(func() { close(cl.acked) })
			}
		case *emqp.Reply:
			if cl := c.calls[m.OrigMsgID]; cl != nil && cl.wantReply {
				cl.ackOnce.Do(func() { close(cl.acked) }) // a REPLY proves the ACK
				select {
				case cl.reply <- m.Payload:
				default: // a second REPLY of a re-run job
				}
			}
		case *emqp.Error:
			if c.calls[m.RefMsgID] == nil { // a PUBLISH's, or a call that ended
				c.log.Warn("client: the broker refused a message", "ref_msgid", m.RefMsgID, "code", m.Code, "text", m.Text)
			}
			if cl := c.calls[m.RefMsgID]; cl != nil {
				berr := &BrokerError{Code: m.Code, Text: m.Text}
				if m.Code == emqp.CodeDuplicate {
					berr.Holder, _ = emqp.DuplicateHolder(m.Text)
				}
				if m.Code == emqp.CodeUnavailable {
					cl.lastErr = berr // resent after ResendAfter
				} else {
					select {
					case cl.failed <- berr:
					default:
					}
				}
			}
		case *emqp.Routes: // the answer to Routes, under its msgid
			if cl := c.calls[m.MsgID]; cl != nil && cl.wantReply {
				cl.ackOnce.Do(func() { close(cl.acked) })
				select {
				case cl.reply <- m.Table:
				default:
				}
			}
		case *emqp.Kbye, *emqp.Disconnect:
			c.mu.Unlock()
			return // the broker is going away: reconnect
		}
		c.mu.Unlock()
	}
}
