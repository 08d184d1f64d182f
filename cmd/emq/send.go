package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
)

func newSendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "send [PAYLOAD | -]",
		Short: "Send a job and print its msgid once the broker has stored it",
		Long: `Send a job to --queue. The payload is the argument, or standard input
with "-" (no argument: an empty payload). Prints the msgid once the broker
has ACKed the job (it is durable then), or with --reply the worker's REPLY
(byte for byte; on a terminal ended with a newline if it has none).
Exits non-zero with the broker's error when it refuses the job, when no
answer comes within --wait, or at once when nothing listens at --broker.

--after ID waits until the job ID (and any other named) is done; it is
stored and ACKed at once, shown as waiting. --batch NAME puts the job in
a batch, and --after-batch NAME waits until that batch is complete (emq
batches). A job waited for that dies or is cancelled cancels this one,
unless --after-failed run.

--priority runs the job before the queue's jobs of a higher number (0 to
65535; 1024 without it). --unique stores the job only if no other job of
the queue holds KEY (pending, delayed, in flight, or done less than
--unique-for ago); otherwise nothing is stored and emq prints
"duplicate: held by job MSGID" to standard error, naming the holder.

Tracing: with TRACEPARENT (and TRACESTATE) in the environment, as a traced
script or an emq worker --exec command has them, the job joins that trace;
with the OTEL_* variables set (OTEL_EXPORTER_OTLP_ENDPOINT, ...) emq send
exports its own span too.

--bulk FILE sends the jobs of FILE ("-": standard input), JSON lines: one
object a line, {"queue": "q", "payload": "text"} or "payload_b64":
"base64", "headers": "a:1,b" or {"a": 1, "b": true}, "msgid": "optional";
a line without queue goes to --queue. They go --bulk-size at a time, each
BULK stored whole or not at all (the broker's --max-bulk bounds it), and
their msgids are printed in order as each is stored. A refused BULK stops
emq send, naming its first refused job by line; the BULKs before it are
stored. The other job flags do not apply with --bulk: headers are the
lines'.

Exit status: 0 the job was stored (and, with --reply, answered); 3 it was
refused as a duplicate of a job holding its --unique key; 1 any other
failure.`,
		Args: cobra.MaximumNArgs(1),
	}
	f := cmd.Flags()
	sendFlags(&binder{f: f}, new(sendDefaults()))
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var o sendOptions
		b := reader()
		sendFlags(b, &o)
		if err := b.apply(c); err != nil {
			return err
		}
		if o.bulk != "" {
			if len(args) > 0 {
				return errors.New("bulk: the jobs come from the file, not an argument")
			}
			return sendBulk(cmd, c, o)
		}
		payload, err := readPayload(cmd.InOrStdin(), args)
		if err != nil {
			return err
		}
		opts, err := o.jobOptions()
		if err != nil {
			return err
		}
		sec, err := securityFrom(c)
		if err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		tp, stopTracing, err := tracerProvider("emq-client", log)
		if err != nil {
			return err
		}
		defer stopTracing()
		ctx, refused := context.WithCancelCause(traceFromEnv(cmd.Context()))
		defer refused(nil)
		cl, err := client.New(client.Options{Broker: o.broker, Security: sec, Logger: log, TracerProvider: tp,
			OnDialError: giveUpUnheard(o.broker, refused)})
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(ctx, o.wait)
		defer cancel()
		if o.reply {
			reply, err := cl.Request(ctx, o.queue, payload, opts...)
			if err != nil {
				return sendError(ctx, err)
			}
			return writeReply(cmd.OutOrStdout(), reply)
		}
		id, err := cl.Send(ctx, o.queue, payload, opts...)
		if err != nil {
			return sendError(ctx, err)
		}
		fmt.Fprintln(cmd.OutOrStdout(), id)
		return nil
	}
	return cmd
}

// sendOptions are emq send's flags, but the security ones.
type sendOptions struct {
	broker, queue                  string
	reply                          bool
	headers                        []string
	timeout                        time.Duration
	retryCount, priority           int
	unique                         string
	uniqueFor                      time.Duration
	after                          []string
	afterBatch, afterFailed, batch string
	batchOpen                      bool
	wait                           time.Duration
	bulk                           string
	bulkSize                       int
}

// sendDefaults are emq send's defaults.
func sendDefaults() sendOptions {
	return sendOptions{broker: broker.DefaultOptions().Frontend, queue: "default", retryCount: -1, priority: -1,
		wait: defaultWait, bulkSize: 1000}
}

// sendFlags declares emq send's flags, but the security ones.
func sendFlags(b *binder, o *sendOptions) {
	b.str(&o.broker, "broker", "the broker's frontend endpoint (several, comma-separated: the one that answers)")
	b.str(&o.queue, "queue", "queue of the job")
	b.boolean(&o.reply, "reply", "wait for the worker's REPLY and print it")
	b.strArray(&o.headers, "header", "header item name=value, or a flag name (repeatable)")
	b.duration(&o.timeout, "timeout", "the job's timeout (header timeout:N)")
	b.integer(&o.retryCount, "retry-count", "retries after failures (header retry-count:N; -1 = the broker's default)")
	b.integer(&o.priority, "priority", "0 to 65535, lower runs first (header priority:N; -1 = none: 1024)")
	b.str(&o.unique, "unique", "a key no other job of the queue may hold (header unique:KEY)")
	b.duration(&o.uniqueFor, "unique-for", "with --unique: how long the key stays held after the job is done (header unique-for:N)")
	b.strSlice(&o.after, "after", "msgids of jobs this one waits for, comma-separated or repeated (header after)")
	b.str(&o.afterBatch, "after-batch", "a batch this job waits for (header after-batch)")
	b.str(&o.afterFailed, "after-failed", "with --after or --after-batch: cancel (the default) or run, when one of them fails")
	b.str(&o.batch, "batch", "the batch the job joins (header batch)")
	b.boolean(&o.batchOpen, "batch-open", "with --batch: the batch stays open for more jobs (header batch-open)")
	b.duration(&o.wait, "wait", "how long to wait for the ACK (or the REPLY); with --bulk, for each BULK's (nothing listening at --broker fails at once)")
	b.str(&o.bulk, "bulk", `send the jobs of this file of JSON lines ("-": standard input) in BULKs, each stored whole or not at all`)
	b.integer(&o.bulkSize, "bulk-size", "with --bulk: jobs in one BULK")
}

// jobOptions are the job's options that o's flags give.
func (o sendOptions) jobOptions() ([]client.Option, error) {
	var opts []client.Option
	for _, h := range o.headers {
		name, value, _ := strings.Cut(h, "=")
		opts = append(opts, client.Header(name, value))
	}
	if o.timeout > 0 {
		opts = append(opts, client.Timeout(o.timeout))
	}
	if o.retryCount >= 0 {
		opts = append(opts, client.RetryCount(o.retryCount))
	}
	switch n := o.priority; {
	case n > math.MaxUint16 || n < -1:
		return nil, fmt.Errorf("priority: %d: want 0 to 65535", n)
	case n >= 0:
		opts = append(opts, client.Priority(uint16(n)))
	}
	switch {
	case o.unique != "":
		opts = append(opts, client.Unique(o.unique, o.uniqueFor))
	case o.uniqueFor != 0:
		return nil, errors.New("unique-for: goes with --unique KEY")
	}
	if len(o.after) > 0 {
		opts = append(opts, client.After(o.after...))
	}
	if o.afterBatch != "" {
		opts = append(opts, client.AfterBatch(o.afterBatch))
	}
	switch o.afterFailed {
	case "":
	case "cancel", "run":
		opts = append(opts, client.AfterFailed(o.afterFailed == "run"))
	default:
		return nil, fmt.Errorf("after-failed: %q: want cancel or run", o.afterFailed)
	}
	switch {
	case o.batch != "":
		opts = append(opts, client.Batch(o.batch, o.batchOpen))
	case o.batchOpen:
		return nil, errors.New("batch-open: goes with --batch NAME")
	}
	return opts, nil
}

// errNotListening is emq send's error when every endpoint of --broker
// refused the connection: no broker runs there, and --wait (for an ACK
// from a broker that is there) would only delay saying so.
var errNotListening = errors.New("nothing listens there (connection refused): is the broker running?")

// giveUpUnheard returns the client's OnDialError for emq send: it ends
// ctx (by cancel) with errNotListening when every endpoint refused.
func giveUpUnheard(endpoints string, cancel context.CancelCauseFunc) func(error) {
	return func(err error) {
		if refusedAll(err) {
			cancel(fmt.Errorf("%s: %w", endpoints, errNotListening))
		}
	}
}

// refusedAll reports whether err is a connection refused, or a list of
// them (zmtp.DialAny's of several endpoints).
func refusedAll(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		for _, e := range errs {
			if !refusedAll(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// sendError is the error of a send that failed under ctx: the broker's
// absence if that ended it, else err (see duplicate).
func sendError(ctx context.Context, err error) error {
	if cause := notListening(ctx, err); cause != nil {
		return cause
	}
	return duplicate(err)
}

// notListening is ctx's cause when the broker's absence (giveUpUnheard)
// ended a call that failed with err, else nil: a job refused before it
// was sent keeps its own error.
func notListening(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(err, context.Canceled) && errors.Is(cause, errNotListening) {
		return cause
	}
	return nil
}

// exitDuplicate is emq send's exit status for a job refused as a
// duplicate (see its help).
const exitDuplicate = 3

// duplicate returns err, unless it is the broker's refusal of a
// duplicate: then an error that says who holds the key and makes main
// exit with exitDuplicate.
func duplicate(err error) error {
	var refused *client.BrokerError
	if !errors.Is(err, client.ErrDuplicate) || !errors.As(err, &refused) {
		return err
	}
	if refused.Holder != "" {
		return exitError{exitDuplicate, fmt.Errorf("duplicate: held by job %s", refused.Holder)}
	}
	return exitError{exitDuplicate, fmt.Errorf("duplicate: %s", refused.Text)} // a broker that did not name it
}

// writeReply writes a REPLY as it came, byte for byte into a file or a
// pipe; on a terminal it ends it with a newline when it has none, so the
// shell's prompt does not follow it on its line.
func writeReply(w io.Writer, reply []byte) error {
	_, err := w.Write(reply)
	if err == nil && isTerminal(w) && !bytes.HasSuffix(reply, []byte("\n")) {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func readPayload(stdin io.Reader, args []string) ([]byte, error) {
	switch {
	case len(args) == 0:
		return nil, nil
	case args[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from standard input: %w", err)
		}
		return b, nil
	}
	return []byte(args[0]), nil
}

// bulkLine is one line of emq send --bulk's file.
type bulkLine struct {
	Queue      string          `json:"queue"`
	Payload    *string         `json:"payload"`
	PayloadB64 *string         `json:"payload_b64"`
	Headers    json.RawMessage `json:"headers"` // "a:1,b" or {"a": 1, "b": true}
	MsgID      string          `json:"msgid"`
}

// sendBulk sends the jobs of --bulk's file in BULKs of --bulk-size and
// prints their msgids as each BULK is stored.
func sendBulk(cmd *cobra.Command, c *config, o sendOptions) error {
	size, wait := o.bulkSize, o.wait
	if size < 1 {
		return fmt.Errorf("bulk-size: %d: want 1 or more", size)
	}
	in := cmd.InOrStdin()
	if file := o.bulk; file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("bulk: %w", err)
		}
		defer f.Close()
		in = f
	}
	sec, err := securityFrom(c)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	base, refused := context.WithCancelCause(traceFromEnv(cmd.Context()))
	defer refused(nil)
	cl, err := client.New(client.Options{Broker: o.broker, Security: sec, Logger: log,
		OnDialError: giveUpUnheard(o.broker, refused)})
	if err != nil {
		return err
	}
	defer cl.Close()
	var jobs []client.BulkJob
	var lines []int // of the jobs
	send := func() error {
		ctx, cancel := context.WithTimeout(base, wait)
		defer cancel()
		ids, err := cl.SendBulk(ctx, jobs)
		if cause := notListening(ctx, err); cause != nil {
			return cause
		}
		var be *client.BulkError
		if errors.As(err, &be) && be.Index >= 0 {
			err = fmt.Errorf("line %d: %w", lines[be.Index], err)
			if errors.Is(err, client.ErrDuplicate) {
				return exitError{exitDuplicate, err}
			}
			return err
		}
		if err != nil {
			return err
		}
		jobs, lines = jobs[:0], lines[:0]
		_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(ids, "\n"))
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<30)
	n, total := 0, 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		j, err := bulkJob(line, o.queue)
		if err != nil {
			return fmt.Errorf("bulk: line %d: %w", n, err)
		}
		jobs, lines = append(jobs, j), append(lines, n)
		total++
		if len(jobs) == size {
			if err := send(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("bulk: reading line %d: %w", n+1, err)
	}
	if len(jobs) > 0 {
		return send()
	}
	if total == 0 {
		return errors.New("bulk: the file holds no job")
	}
	return nil
}

// bulkJob reads one line of a --bulk file.
func bulkJob(line []byte, queue string) (client.BulkJob, error) {
	var l bulkLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return client.BulkJob{}, fmt.Errorf("not a job object (queue, payload or payload_b64, headers, msgid): %w", err)
	}
	if l.Queue != "" {
		queue = l.Queue
	}
	j := client.BulkJob{Queue: queue}
	switch {
	case l.Payload != nil && l.PayloadB64 != nil:
		return j, errors.New("payload and payload_b64: give one")
	case l.Payload != nil:
		j.Payload = []byte(*l.Payload)
	case l.PayloadB64 != nil:
		b, err := base64.StdEncoding.DecodeString(*l.PayloadB64)
		if err != nil {
			return j, fmt.Errorf("payload_b64: %w", err)
		}
		j.Payload = b
	}
	text := string(l.Headers)
	if len(l.Headers) > 0 && l.Headers[0] == '"' {
		if err := json.Unmarshal(l.Headers, &text); err != nil {
			return j, fmt.Errorf("headers: %w", err)
		}
	}
	if text == "null" {
		text = ""
	}
	h, err := emqp.ParseHeaders(text)
	if err != nil {
		return j, err
	}
	for _, item := range h.Items() {
		j.Options = append(j.Options, client.Header(item.Name, item.Value))
	}
	if l.MsgID != "" {
		j.Options = append(j.Options, client.MsgID(l.MsgID))
	}
	return j, nil
}
