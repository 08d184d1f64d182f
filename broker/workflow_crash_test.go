package broker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// A fan-out of 1,000 jobs in a batch and a fan-in callback after it: a
// worker is lost with jobs in hand a third of the way, the broker is
// SIGKILLed two thirds of the way and started again on its journal, and
// still the callback runs once, after every job of the batch has. The
// last worker serves until the broker holds nothing of the queue, so
// that a second delivery of the callback would be counted.
func TestWorkflowFanInSurvivesKills(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	adminAddr := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	env := "EMQ_TEST_ADMIN=" + adminAddr
	c := startChild(t, dir, frontend, backend, env)
	client := bt.Dial(t, frontend, "c")
	fan := map[string]bool{}
	for range 1000 {
		fan[client.Request("fan", "batch:b", nil)] = true
	}
	callback := client.Request("fan", "after-batch:b", []byte("callback"))

	// idle says whether the broker holds nothing of queue fan: no job
	// pending, waiting for its time or in flight.
	idle := func() bool {
		var qs []broker.QueueInfo
		if bt.APIAt(t, adminAddr, "GET", "/api/v1/queues", "", &qs) != 200 {
			return false
		}
		for _, q := range qs {
			if q.Name == "fan" && q.Pending+q.Delayed+q.InFlight > 0 {
				return false
			}
		}
		return true
	}
	done := map[string]bool{}
	callbacks := 0
	// work has a worker run jobs until n of the batch are done; with
	// keep, it then holds 4 jobs it never answers, and is lost. With n
	// 0 it runs every job it gets, the callback too, until the callback
	// has run and the broker holds nothing of the queue.
	work := func(id string, n int, keep bool) {
		t.Helper()
		w := dialRaw(t, backend, id)
		w.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "fan"}}})
		for range 8 {
			w.send(&emqp.Ready{MsgID: emqp.NewID()})
		}
		poll := time.NewTicker(20 * time.Millisecond)
		defer poll.Stop()
		deadline := time.After(time.Minute)
		held := 0
		for {
			var m emqp.Message
			select {
			case m = <-w.in:
			case <-poll.C:
				if n == 0 && callbacks > 0 && idle() {
					w.conn.Close()
					return
				}
				continue
			case <-deadline:
				t.Fatalf("worker %s: after a minute, %d jobs of the batch done, the callback run %d times", id, len(done), callbacks)
			}
			r, ok := m.(*emqp.Request)
			if !ok {
				continue
			}
			if r.MsgID == callback {
				if callbacks++; callbacks > 1 {
					t.Fatalf("the callback was delivered again (%d times), to worker %s", callbacks, id)
				}
				for id := range fan {
					if !done[id] {
						t.Fatalf("the callback came before job %s of its batch was done", id)
					}
				}
				w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
				w.send(&emqp.Ready{MsgID: emqp.NewID()})
				continue
			}
			if n > 0 && len(done) >= n && keep {
				if held++; held == 4 {
					w.conn.Close() // lost, its 4 jobs with it
					return
				}
				continue
			}
			w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
			w.send(&emqp.Ready{MsgID: emqp.NewID()})
			done[r.MsgID] = true
			if n > 0 && len(done) >= n && !keep {
				w.conn.Close()
				return
			}
		}
	}
	work("w1", 333, true)
	work("w2", 666, false)
	c.kill()
	startChild(t, dir, frontend, backend, env)
	work("w3", 0, false)
	if callbacks != 1 || len(done) != len(fan) {
		t.Fatalf("the callback ran %d times, %d jobs of the batch of %d done", callbacks, len(done), len(fan))
	}
}
