package worker_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
)

// fakeBroker is the test playing the broker on a raw ZMTP ROUTER, for
// what the real broker does not do yet (CANCEL, PROGRESS). It ACKs each
// INFORM and follows the ACK with a HEARTBEAT, answers each HEARTBEAT
// with one and ROUTES with no shards, and hands the test everything else.
type fakeBroker struct {
	t      testing.TB
	router *zmtp.Router
	ready  chan struct{} // closed once router is set
	in     chan fromPeer
	beats  atomic.Int64 // HEARTBEATs received
}

// fromPeer is a message and the routing id it came from.
type fromPeer struct {
	id  string
	msg emqp.Message
}

func startFakeBroker(t testing.TB) *fakeBroker {
	t.Helper()
	fb := &fakeBroker{t: t, ready: make(chan struct{}), in: make(chan fromPeer, 4096)}
	r, err := zmtp.Listen("tcp://127.0.0.1:0", zmtp.Options{Logger: bt.Logger(t), Receive: fb.receive})
	if err != nil {
		t.Fatal(err)
	}
	fb.router = r
	close(fb.ready)
	t.Cleanup(func() { r.Close() })
	return fb
}

// Endpoint is where workers dial.
func (fb *fakeBroker) Endpoint() string { return fb.router.Endpoint() }

func (fb *fakeBroker) receive(id string, frames [][]byte, _ zmtp.Held) {
	<-fb.ready
	m, err := emqp.Decode(frames)
	if err != nil {
		fb.t.Errorf("the broker got a message it cannot decode: %v", err)
		return
	}
	switch m := m.(type) {
	case *emqp.Heartbeat:
		fb.beats.Add(1)
		fb.trySend(id, &emqp.Heartbeat{MsgID: emqp.NewID()})
		return
	case *emqp.Routes: // a worker asks where its queues are: no shards here
		fb.trySend(id, &emqp.Routes{MsgID: m.MsgID, Table: []byte("{}")})
		return
	case *emqp.Inform:
		fb.trySend(id, &emqp.Ack{MsgID: emqp.NewID(), AckedID: m.MsgID})
		fb.trySend(id, &emqp.Heartbeat{MsgID: emqp.NewID()})
	}
	fb.in <- fromPeer{id, m}
}

// trySend sends m to id; a peer gone meanwhile is not an error.
func (fb *fakeBroker) trySend(id string, m emqp.Message) {
	_ = fb.router.Send(id, emqp.Encode(m))
}

// Send sends m to the peer with routing id id.
func (fb *fakeBroker) Send(id string, m emqp.Message) {
	fb.t.Helper()
	if err := fb.router.Send(id, emqp.Encode(m)); err != nil {
		fb.t.Fatalf("send %s to the worker: %v", m.Command(), err)
	}
}

// Next returns the next message that is not a HEARTBEAT, or fails the
// test after bt.Wait.
func (fb *fakeBroker) Next() fromPeer {
	fb.t.Helper()
	select {
	case p := <-fb.in:
		return p
	case <-time.After(bt.Wait):
		fb.t.Fatal("nothing from the worker")
	}
	return fromPeer{}
}

// expect receives the next message and fails unless it is a T.
func expect[T emqp.Message](fb *fakeBroker) T {
	fb.t.Helper()
	p := fb.Next()
	m, ok := p.msg.(T)
	if !ok {
		fb.t.Fatalf("the broker got %s %+v, want %T", p.msg.Command(), p.msg, m)
	}
	return m
}

// Accept waits for a worker's INFORM (which receive ACKed) and returns
// its routing id.
func (fb *fakeBroker) Accept() string {
	fb.t.Helper()
	p := fb.Next()
	if _, ok := p.msg.(*emqp.Inform); !ok {
		fb.t.Fatalf("the broker got %s %+v, want the worker's INFORM", p.msg.Command(), p.msg)
	}
	return p.id
}

// WaitBeats returns once n more HEARTBEATs have come.
func (fb *fakeBroker) WaitBeats(n int64) {
	fb.t.Helper()
	until := fb.beats.Load() + n
	bt.Eventually(fb.t, "HEARTBEATs from the worker", func() bool { return fb.beats.Load() >= until })
}
