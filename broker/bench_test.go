package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
)

// BenchmarkEndToEnd is the whole durable path: REQUEST → journal (fsync) →
// ACK → dispatch → REPLY → delete, with 16 clients (each keeping up to 32
// REQUESTs unACKed) and 16 worker slots (16 workers of one slot, or 4 of
// four), 100-byte payloads.
//
//	go test -run '^$' -bench EndToEnd -benchtime 50000x ./broker/
func BenchmarkEndToEnd(b *testing.B) {
	for _, c := range []struct{ clients, workers, slots, window int }{
		{16, 16, 1, 32}, {16, 4, 4, 32}, {16, 1, 16, 32}, {1, 1, 1, 1},
	} {
		name := fmt.Sprintf("clients=%d/workers=%dx%d/window=%d", c.clients, c.workers, c.slots, c.window)
		b.Run(name, func(b *testing.B) { endToEnd(b, c.clients, c.workers, c.slots, c.window) })
	}
}

func endToEnd(b *testing.B, clients, workers, slots, window int) {
	br := bt.Start(b, "", func(o *broker.Options) {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	ctx := context.Background()
	dial := func(ep, id string) *zmtp.Conn {
		c, err := zmtp.Dial(ctx, ep, zmtp.DialOptions{Identity: []byte(id)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	payload := make([]byte, 100)
	var replied atomic.Int64
	total := int64(b.N)
	done := make(chan struct{})

	// Workers: INFORM, then one READY per slot; each job is answered with
	// a REPLY and a new READY in one write.
	var ready sync.WaitGroup
	for w := range workers {
		conn := dial(br.Backend(), fmt.Sprintf("bench-worker-%d", w))
		conn.WriteMsgs(emqp.Encode(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "bench"}}}))
		ready.Add(1)
		go func() {
			informed := false
			for {
				m, err := emqp.ReadMessage(conn.ReadMsg, func(err error) { b.Error(err) })
				if err != nil {
					return
				}
				switch m := m.(type) {
				case *emqp.Ack:
					if !informed {
						informed = true
						for range slots {
							conn.WriteMsgs(emqp.Encode(&emqp.Ready{MsgID: emqp.NewID()}))
						}
						ready.Done()
					}
				case *emqp.Request:
					conn.WriteMsgs(
						emqp.Encode(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: m.MsgID}),
						emqp.Encode(&emqp.Ready{MsgID: emqp.NewID()}))
					if replied.Add(1) == total {
						close(done)
					}
				}
			}
		}()
	}
	ready.Wait()

	// Clients: each sends its share, with at most window unACKed.
	var sent atomic.Int64
	var clientsDone sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		conn := dial(br.Frontend(), fmt.Sprintf("bench-client-%d", c))
		slotsFree := make(chan struct{}, window)
		for range window {
			slotsFree <- struct{}{}
		}
		clientsDone.Add(2)
		go func() { // ACK reader
			defer clientsDone.Done()
			for {
				m, err := emqp.ReadMessage(conn.ReadMsg, func(err error) { b.Error(err) })
				if err != nil {
					return
				}
				if m.Command() != emqp.CmdAck {
					b.Errorf("client got %T", m)
				}
				slotsFree <- struct{}{}
			}
		}()
		go func() { // sender: as many REQUESTs in one write as the window allows
			defer clientsDone.Done()
			var batch [][][]byte
			for {
				batch = batch[:0]
				<-slotsFree
				for more := true; more; {
					if sent.Add(1) > total {
						break
					}
					batch = append(batch, emqp.Encode(&emqp.Request{MsgID: emqp.NewID(), Queue: "bench", Payload: payload}))
					select {
					case <-slotsFree:
					default:
						more = false
					}
				}
				if len(batch) == 0 {
					return
				}
				if err := conn.WriteMsgs(batch...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(time.Duration(b.N)*time.Millisecond + time.Minute):
		b.Fatalf("only %d of %d jobs replied", replied.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	if err := br.Stop(); err != nil {
		b.Fatal(err)
	}
}
