package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/worker"
)

// fakeOpts are worker options for a fakeBroker: HEARTBEATs every 50 ms,
// and a timeout that a busy test machine does not reach.
func fakeOpts(concurrency int) worker.Options {
	return worker.Options{Concurrency: concurrency, HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 2 * time.Second}
}

// receive returns what comes on ch, or fails the test after bt.Wait.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bt.Wait):
		t.Fatalf("%s: not within %v", what, bt.Wait)
	}
	var zero T
	return zero
}

// A CANCEL ends the handler's context with the cause ErrCancelled, with or
// without a timeout header; the worker does not answer it, sends the
// handler's FAIL and a READY, and takes the next job. A CANCEL for a job
// not running here changes nothing.
func TestCancelEndsTheHandlersContext(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	type ended struct {
		cause       error
		hasDeadline bool
	}
	started, ends := make(chan string, 1), make(chan ended, 1)
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": func(ctx context.Context, j *worker.Job) ([]byte, error) {
			if string(j.Payload) != "block" {
				return []byte("next job done"), nil
			}
			started <- j.MsgID
			<-ctx.Done()
			_, hasDeadline := ctx.Deadline()
			ends <- ended{context.Cause(ctx), hasDeadline}
			return nil, ctx.Err()
		},
	})
	id := fb.Accept()
	expect[*emqp.Ready](fb)
	fb.Send(id, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: emqp.NewID()})

	for _, headers := range []string{"", "timeout:60"} {
		job := emqp.NewID()
		h, err := emqp.ParseHeaders(headers)
		if err != nil {
			t.Fatal(err)
		}
		fb.Send(id, &emqp.Request{MsgID: job, Queue: "q", Headers: h, Payload: []byte("block")})
		if got := receive(t, "the handler started", started); got != job {
			t.Fatalf("handler got job %s, want %s", got, job)
		}
		fb.Send(id, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: job})
		end := receive(t, "the handler's context ended", ends)
		if end.cause != worker.ErrCancelled {
			t.Errorf("headers %q: context.Cause = %v, want worker.ErrCancelled", headers, end.cause)
		}
		if want := headers != ""; end.hasDeadline != want {
			t.Errorf("headers %q: the context has a deadline: %v, want %v", headers, end.hasDeadline, want)
		}
		fail := expect[*emqp.Fail](fb)
		if fail.OrigMsgID != job || !strings.Contains(fail.Reason, "cancelled") {
			t.Errorf("FAIL for %s, reason %q; want one for %s that says it was cancelled", fail.OrigMsgID, fail.Reason, job)
		}
		expect[*emqp.Ready](fb)
	}

	next := emqp.NewID()
	fb.Send(id, &emqp.Request{MsgID: next, Queue: "q", Payload: []byte("x")})
	if r := expect[*emqp.Reply](fb); r.OrigMsgID != next || string(r.Payload) != "next job done" {
		t.Fatalf("REPLY for %s: %q; want the next job's", r.OrigMsgID, r.Payload)
	}
	expect[*emqp.Ready](fb)
}

// A handler that returns its own error after a CANCEL FAILs with a reason
// that says the job was cancelled; one that returns ErrCancelled says it
// once.
func TestCancelledFailReason(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	started := make(chan struct{}, 1)
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			if string(j.Payload) == "cause" {
				return nil, context.Cause(ctx)
			}
			return nil, errors.New("stopped half way")
		},
	})
	id := fb.Accept()
	expect[*emqp.Ready](fb)
	for payload, want := range map[string]string{"own": "worker: job cancelled: stopped half way", "cause": "worker: job cancelled"} {
		job := emqp.NewID()
		fb.Send(id, &emqp.Request{MsgID: job, Queue: "q", Payload: []byte(payload)})
		receive(t, "the handler started", started)
		fb.Send(id, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: job})
		if fail := expect[*emqp.Fail](fb); fail.Reason != want {
			t.Errorf("FAIL reason %q, want %q", fail.Reason, want)
		}
		expect[*emqp.Ready](fb)
	}
}
