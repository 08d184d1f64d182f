package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
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

// BenchmarkDelayedIdle is a broker holding 1,000,000 delayed jobs with
// nothing else to do: it reports the broker's CPU use while it waits
// (goal: under 1 % of one core), then how late 10,000 jobs, due one a
// millisecond, reach a worker waiting for them (goal: within 10 ms of
// their time). Lateness counts from the due time to the REQUEST read by
// the worker, so it includes the dispatch and the loopback hop.
//
//	go test -run '^$' -bench DelayedIdle -benchtime 1x ./broker/
//
// EMQ_BENCH_DELAYED=N stores N jobs instead of 1,000,000.
func BenchmarkDelayedIdle(b *testing.B) {
	if testing.Short() {
		b.Skip("takes more than a minute")
	}
	stored, due := 1_000_000, 10_000
	if n, err := strconv.Atoi(os.Getenv("EMQ_BENCH_DELAYED")); err == nil {
		stored = n
	}
	const idle = 30 * time.Second // the window in which CPU is measured
	dir := b.TempDir()
	start := time.Now()
	var firstDue time.Time
	func() {
		j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), boltstore.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		far := time.Now().Add(24 * time.Hour)
		appendAll(b, j, stored, func(int) *store.Job {
			return &store.Job{MsgID: emqp.NewID(), Queue: "later", Payload: make([]byte, 100), NotBefore: far}
		})
		// Due after the replay (a few seconds) and the idle window.
		firstDue = time.Now().Add(time.Since(start)/4 + idle + 15*time.Second)
		appendAll(b, j, due, func(i int) *store.Job {
			at := firstDue.Add(time.Duration(i) * time.Millisecond)
			return &store.Job{MsgID: emqp.NewID(), Queue: "due", Payload: strconv.AppendInt(nil, at.UnixNano(), 10), NotBefore: at}
		})
	}()
	b.Logf("stored %d delayed jobs in %v", stored+due, time.Since(start).Round(time.Second))

	br := bt.Start(b, dir, func(o *broker.Options) {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	cpuShare, window := idleCPU(b, idle, firstDue, 5*time.Second)
	b.Logf("idle %v: CPU %.3f%% of a core; waiting for %d due jobs", window, 100*cpuShare, due)
	late := lateness(b, br.Backend(), "due", due, func(r *emqp.Request) time.Time {
		at, _ := strconv.ParseInt(string(r.Payload), 10, 64)
		return time.Unix(0, at)
	})
	b.ReportMetric(100*cpuShare, "%cpu-idle")
	reportLateness(b, late)
}

// idleCPU lets the replay's garbage be collected, then measures this
// process's CPU share over up to max, ending margin before dueAt; nothing
// happens in the process but the broker waiting.
func idleCPU(b *testing.B, max time.Duration, dueAt time.Time, margin time.Duration) (share float64, window time.Duration) {
	time.Sleep(2 * time.Second)
	window = min(max, time.Until(dueAt)-margin)
	if window < 5*time.Second {
		b.Fatalf("the replay took too long: %v left before the first job is due", time.Until(dueAt))
	}
	cpu0, wall0 := cpuTime(), time.Now()
	time.Sleep(window) // the measurement
	return (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds(), window
}

// lateness is a worker of queue at backend with n slots waiting for n
// jobs: how late each REQUEST is read, after the time dueOf says, sorted.
func lateness(b *testing.B, backend, queue string, n int, dueOf func(*emqp.Request) time.Time) []time.Duration {
	conn, err := zmtp.Dial(context.Background(), backend, zmtp.DialOptions{Identity: []byte("waiting")})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	msgs := [][][]byte{emqp.Encode(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: queue}}})}
	for range n {
		msgs = append(msgs, emqp.Encode(&emqp.Ready{MsgID: emqp.NewID()}))
	}
	if err := conn.WriteMsgs(msgs...); err != nil {
		b.Fatal(err)
	}
	var late []time.Duration
	for len(late) < n {
		m, err := emqp.ReadMessage(conn.ReadMsg, nil)
		if err != nil {
			b.Fatal(err)
		}
		var answer emqp.Message
		switch m := m.(type) {
		case *emqp.Request:
			late = append(late, time.Since(dueOf(m)))
			answer = &emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: m.MsgID}
		case *emqp.Heartbeat: // so that the broker does not lose the worker while it waits
			answer = &emqp.Heartbeat{MsgID: emqp.NewID()}
		default:
			continue
		}
		if err := conn.WriteMsgs(emqp.Encode(answer)); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(late)
	return late
}

// reportLateness reports sorted latenesses' p50, p99 and max.
func reportLateness(b *testing.B, late []time.Duration) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(late[len(late)/2]), "late-p50-ms")
	b.ReportMetric(ms(late[len(late)*99/100]), "late-p99-ms")
	b.ReportMetric(ms(late[len(late)-1]), "late-max-ms")
}

// appendAll appends n jobs made by mk, many at a time.
func appendAll(b testing.TB, j store.Journal, n int, mk func(i int) *store.Job) {
	writeAll(b, n, func(i int, done func(error)) { j.Append(mk(i), func(_ bool, err error) { done(err) }) })
}

// putAll stores n schedules made by mk, many at a time.
func putAll(b testing.TB, j store.Journal, n int, mk func(i int) *store.Schedule) {
	writeAll(b, n, func(i int, done func(error)) { j.PutSchedule(mk(i), func(_ bool, err error) { done(err) }) })
}

// writeAll makes n journal writes, up to 4,096 at a time, and fails b at
// the first error.
func writeAll(b testing.TB, n int, write func(i int, done func(error))) {
	errs := make(chan error, 4096)
	inFlight := 0
	for i := range n {
		if inFlight == cap(errs) {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			inFlight--
		}
		write(i, func(err error) { errs <- err })
		inFlight++
	}
	for ; inFlight > 0; inFlight-- {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
