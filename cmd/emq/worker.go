package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
	"github.com/eventmq/emq/worker"
)

const defaultWait = 30 * time.Second

func newWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --exec 'CMD ARGS'",
		Short: "Run a shell command for each job",
		Long: `Serve --queues, running --exec (through /bin/sh -c) once per job, up to
--concurrency at a time. The job's payload is the command's standard input;
its standard output is the REPLY. The environment has EMQ_MSGID, EMQ_QUEUE,
EMQ_ATTEMPT, EMQ_HEADERS (the headers as sent) and EMQ_HEADER_<NAME> for each
header item (name upper-cased, - as _). A job that carries a trace (W3C Trace
Context headers) gives the command TRACEPARENT and TRACESTATE naming the
worker's span of the job, as OpenTelemetry's tools for commands read them;
with the OTEL_* variables set (OTEL_EXPORTER_OTLP_ENDPOINT, ...) the worker
exports that span itself. A non-zero exit is a FAIL with the
tail of standard error; the broker retries the job. At the job's timeout,
or when the job is cancelled, the command's whole process group is killed
(SIGKILL) and the job FAILs saying which. SIGTERM or SIGINT: no new jobs,
running ones get --grace to finish.

Progress (unix): the command gets a pipe as file descriptor 3, named by
EMQ_PROGRESS_FD=3. Each line written there is one progress report for the
broker: a percent from 0 to 100, a short note, or both ("40", "resizing",
"40 resizing"), cut to 1024 bytes. At most 10 a second go out; a newer one
replaces one that waits, so the latest arrives, but one still waiting when
the command ends is dropped. For example:

  emq worker --exec 'echo "10 downloading" >&3; fetch; echo "60 resizing" >&3; resize'`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.String("broker", broker.DefaultOptions().Backend, "the broker's backend endpoint (several, comma-separated: the one that answers)")
	f.String("queues", "default", "queues to serve, comma-separated; name:weight gives a weight (default 10)")
	f.Int("concurrency", 1, "jobs run at once")
	f.String("exec", "", "the command to run for each job (required)")
	f.Duration("grace", 30*time.Second, "time running jobs get to finish at stop")
	f.Duration("heartbeat-interval", time.Second, "HEARTBEAT to the broker this often")
	f.Duration("heartbeat-timeout", 3*time.Second, "dial every endpoint again when the broker is silent this long (a paused or frozen broker)")
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		command := c.str("exec")
		if command == "" {
			return errors.New("exec: the command to run is required (--exec 'CMD ARGS')")
		}
		opts := worker.Options{Broker: c.str("broker"),
			Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))}
		if opts.Security, err = securityFrom(c); err != nil {
			return err
		}
		if opts.Queues, err = parseQueues(c.str("queues")); err != nil {
			return err
		}
		if opts.Concurrency, err = c.integer("concurrency"); err != nil {
			return err
		}
		if opts.Grace, err = c.duration("grace"); err != nil {
			return err
		}
		if opts.HeartbeatInterval, err = c.duration("heartbeat-interval"); err != nil {
			return err
		}
		if opts.HeartbeatTimeout, err = c.duration("heartbeat-timeout"); err != nil {
			return err
		}
		tp, stopTracing, err := tracerProvider("emq-worker", opts.Logger)
		if err != nil {
			return err
		}
		defer stopTracing()
		opts.TracerProvider = tp
		w, err := worker.New(opts)
		if err != nil {
			return err
		}
		w.Handle("*", execHandler(command))
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return w.Run(ctx)
	}
	return cmd
}

func parseQueues(s string) ([]worker.Queue, error) {
	var qs []worker.Queue
	for _, item := range strings.Split(s, ",") {
		name, weight, hasWeight := strings.Cut(strings.TrimSpace(item), ":")
		if name == "" {
			return nil, fmt.Errorf("queues: %q has an empty queue name", s)
		}
		q := worker.Queue{Name: name, Weight: 10}
		if hasWeight {
			n, err := strconv.Atoi(weight)
			if err != nil {
				return nil, fmt.Errorf("queues: weight %q of %s is not a whole number", weight, name)
			}
			q.Weight = n
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// execHandler runs command for each job; a timeout or a cancel kills it
// (on unix with what it started: see killGroupOnCancel).
func execHandler(command string) worker.Handler {
	return func(ctx context.Context, job *worker.Job) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		killGroupOnCancel(cmd)
		cmd.WaitDelay = time.Second // grandchildren holding the pipes do not hold us
		cmd.Stdin = bytes.NewReader(job.Payload)
		var stdout bytes.Buffer
		stderr := &tail{max: 2048}
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		cmd.Env = append(os.Environ(),
			"EMQ_MSGID="+job.MsgID, "EMQ_QUEUE="+job.Queue,
			"EMQ_ATTEMPT="+strconv.Itoa(job.Attempt), "EMQ_HEADERS="+job.Headers.String())
		for _, h := range job.Headers.Items() {
			name := strings.ToUpper(strings.Map(func(r rune) rune {
				if r == '-' || r == '.' || r == ' ' {
					return '_'
				}
				return r
			}, h.Name))
			cmd.Env = append(cmd.Env, "EMQ_HEADER_"+name+"="+h.Value)
		}
		cmd.Env = append(cmd.Env, traceEnv(ctx)...)
		progress, err := progressPipe(cmd)
		if err != nil {
			return nil, fmt.Errorf("%s: progress pipe: %w", command, err)
		}
		err = cmd.Start()
		progress.read(job) // after Start: the command has its end of the pipe
		if err == nil {
			err = cmd.Wait()
		}
		progress.close(cmd.WaitDelay)
		if ctx.Err() != nil {
			// context.Cause tells a timeout from a cancel (worker.ErrCancelled).
			return nil, fmt.Errorf("%s: killed: %w", command, context.Cause(ctx))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v: %s", command, err, strings.TrimSpace(stderr.String()))
		}
		return stdout.Bytes(), nil
	}
}

// traceEnv is TRACEPARENT and TRACESTATE of ctx's span: the job's span
// in this worker, or the job's own trace context when no SDK records.
func traceEnv(ctx context.Context) []string {
	h := jobtrace.Inject(ctx, emqp.Headers{})
	var env []string
	if v, ok := h.Get(emqp.HeaderTraceparent); ok {
		env = append(env, "TRACEPARENT="+v)
	}
	if v, ok := h.Get(emqp.HeaderTracestate); ok && v != "" {
		env = append(env, "TRACESTATE="+v)
	}
	return env
}

// progressFD is the command's file descriptor for progress lines.
const progressFD = 3

// progressLines is the pipe a command writes its progress lines to; nil
// where commands get none.
type progressLines struct {
	r, w *os.File
	done chan struct{} // closed when the reader has ended
}

// newProgressLines gives cmd a pipe as file descriptor progressFD, and
// names it in EMQ_PROGRESS_FD; cmd.Env must be set already.
func newProgressLines(cmd *exec.Cmd) (*progressLines, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{w} // the first one is descriptor 3
	cmd.Env = append(cmd.Env, "EMQ_PROGRESS_FD="+strconv.Itoa(progressFD))
	return &progressLines{r: r, w: w, done: make(chan struct{})}, nil
}

// read closes the parent's write end and passes each line to
// job.Progress, in a goroutine, so that the command never waits for us.
func (p *progressLines) read(job *worker.Job) {
	if p == nil {
		return
	}
	p.w.Close()
	go func() {
		defer close(p.done)
		readProgress(p.r, job)
	}()
}

// close waits for the lines left in the pipe, then closes it. A process
// the command left running may hold the pipe open: then it waits no more
// than wait.
func (p *progressLines) close(wait time.Duration) {
	if p == nil {
		return
	}
	select {
	case <-p.done:
	case <-time.After(wait):
	}
	p.r.Close() // ends the read that a leftover process holds up
	<-p.done
}

// readProgress passes each line from r to job.Progress until r ends: a
// percent, a note or both, as in a PROGRESS. A line longer than
// emqp.MaxProgressLen is cut (by Progress, on a UTF-8 boundary).
func readProgress(r io.Reader, job *worker.Job) {
	br := bufio.NewReaderSize(r, 2*emqp.MaxProgressLen)
	for {
		line, err := br.ReadSlice('\n')
		text := strings.TrimRight(string(line), "\r\n")
		for errors.Is(err, bufio.ErrBufferFull) { // the rest of a long line is dropped
			_, err = br.ReadSlice('\n')
		}
		if text != "" {
			report := emqp.Progress{Text: text}
			percent, ok := report.Percent()
			if !ok {
				percent = -1
			}
			job.Progress(percent, report.Note())
		}
		if err != nil {
			return
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }
