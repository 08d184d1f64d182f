package broker_test

import (
	"testing"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// A fan-out of 1,000 jobs in a batch and a fan-in callback after it: a
// worker is lost with jobs in hand a third of the way, the broker is
// SIGKILLed two thirds of the way and started again on its journal, and
// still the callback runs once, after every job of the batch has.
func TestWorkflowFanInSurvivesKills(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	c := startChild(t, dir, frontend, backend)
	client := bt.Dial(t, frontend, "c")
	fan := map[string]bool{}
	for range 1000 {
		fan[client.Request("fan", "batch:b", nil)] = true
	}
	callback := client.Request("fan", "after-batch:b", []byte("callback"))

	done := map[string]bool{}
	callbacks := 0
	// work has a worker run jobs until n of the batch are done or the
	// callback ran; with keep, it ends holding 4 jobs it never answers.
	work := func(id string, n int, keep bool) {
		t.Helper()
		w := dialRaw(t, backend, id)
		w.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "fan"}}})
		for range 8 {
			w.send(&emqp.Ready{MsgID: emqp.NewID()})
		}
		held := 0
		for m := range w.in {
			r, ok := m.(*emqp.Request)
			if !ok {
				continue
			}
			if r.MsgID == callback {
				callbacks++
				for id := range fan {
					if !done[id] {
						t.Fatalf("the callback came before job %s of its batch was done", id)
					}
				}
				w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
				return
			}
			if len(done) >= n && keep {
				if held++; held == 4 {
					w.conn.Close() // lost, its 4 jobs with it
					return
				}
				continue
			}
			w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
			w.send(&emqp.Ready{MsgID: emqp.NewID()})
			done[r.MsgID] = true
			if len(done) >= n && !keep {
				w.conn.Close()
				return
			}
		}
	}
	work("w1", 333, true)
	work("w2", 666, false)
	c.kill()
	startChild(t, dir, frontend, backend)
	work("w3", 1001, false)
	if callbacks != 1 {
		t.Fatalf("the callback ran %d times", callbacks)
	}
}
