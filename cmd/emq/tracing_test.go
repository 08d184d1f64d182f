//go:build unix

package main

import (
	"testing"

	"github.com/eventmq/emq/emqp"
)

// A job that carries a trace gives emq worker --exec's command
// TRACEPARENT and TRACESTATE: with no OTEL_* set, the job's own.
func TestWorkerExecGetsTheJobsTrace(t *testing.T) {
	t.Parallel()
	rb := startRawBroker(t)
	startWorkerProcess(t, "--broker", rb.router.Endpoint(), "--queues", "q",
		"--exec", `printf '%s|%s' "$TRACEPARENT" "$TRACESTATE"`)
	id, _ := recv[*emqp.Inform](rb)
	recv[*emqp.Ready](rb)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderTraceparent, Value: traceparent},
		emqp.Header{Name: emqp.HeaderTracestate, Value: "vendor=a,other=b"})
	traced, plain := emqp.NewID(), emqp.NewID()
	rb.send(id, &emqp.Request{MsgID: traced, Queue: "q", Headers: h})
	if _, r := recv[*emqp.Reply](rb); r.OrigMsgID != traced || string(r.Payload) != traceparent+"|vendor=a,other=b" {
		t.Fatalf("REPLY for %s: %q; want the job's TRACEPARENT|TRACESTATE", r.OrigMsgID, r.Payload)
	}
	recv[*emqp.Ready](rb)
	rb.send(id, &emqp.Request{MsgID: plain, Queue: "q"})
	if _, r := recv[*emqp.Reply](rb); r.OrigMsgID != plain || string(r.Payload) != "|" {
		t.Fatalf("REPLY for %s: %q; want no trace for a job without one", r.OrigMsgID, r.Payload)
	}
}
