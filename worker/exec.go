package worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
)

// Exec is a Handler that runs command through /bin/sh -c once per job
// (what `emq worker --exec` runs). The job's payload is the command's
// standard input and its standard output the result; a non-zero exit is
// an error with the tail of its standard error (2 KiB), a FAIL.
//
// The command's environment is the worker's, with EMQ_MSGID, EMQ_QUEUE,
// EMQ_ATTEMPT, EMQ_HEADERS (the headers as sent) and EMQ_HEADER_<NAME>
// for each header item (the name upper-cased, '-', '.' and ' ' as '_');
// TRACEPARENT and TRACESTATE name the job's span in this worker (or the
// job's own trace context when no SDK records), as OpenTelemetry's
// tools for commands read them.
//
// On unix the command gets a pipe as file descriptor 3, named by
// EMQ_PROGRESS_FD=3: each line written there is a Job.Progress, a
// percent from 0 to 100, a note or both ("40", "resizing", "40
// resizing"), as in a PROGRESS.
//
// At the job's timeout or its cancel the command is killed with SIGKILL,
// on unix with its whole process group (what it started in the
// background too), and the error says which (context.Cause: a timeout,
// or ErrCancelled).
func Exec(command string) Handler {
	return func(ctx context.Context, job *Job) ([]byte, error) {
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
			// context.Cause tells a timeout from a cancel (ErrCancelled).
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
func (p *progressLines) read(job *Job) {
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
func readProgress(r io.Reader, job *Job) {
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
