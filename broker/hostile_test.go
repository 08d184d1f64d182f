package broker_test

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// zmtpHello is a ZMTP 3.0 NULL greeting and a READY for a DEALER with id.
func zmtpHello(id string) []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	body := append([]byte{5}, "READY"...)
	for _, kv := range [][2]string{{"Socket-Type", "DEALER"}, {"Identity", id}} {
		body = append(body, byte(len(kv[0])))
		body = append(body, kv[0]...)
		body = binary.BigEndian.AppendUint32(body, uint32(len(kv[1])))
		body = append(body, kv[1]...)
	}
	return append(append(g, 0x04, byte(len(body))), body...)
}

// zmtpMsg frames a message (short frames only).
func zmtpMsg(frames [][]byte) []byte {
	var b []byte
	for i, f := range frames {
		flags := byte(0)
		if i < len(frames)-1 {
			flags = 1
		}
		if len(f) > 255 {
			b = binary.BigEndian.AppendUint64(append(b, flags|2), uint64(len(f)))
		} else {
			b = append(b, flags, byte(len(f)))
		}
		b = append(b, f...)
	}
	return b
}

// roundTrips runs n jobs through a fresh client and worker.
func roundTrips(t *testing.T, frontend, backend, name string, n int) {
	t.Helper()
	client := bt.Dial(t, frontend, name+"-client")
	worker := bt.Dial(t, backend, name+"-worker")
	worker.Inform(name)
	// As every worker does: a journal's flush slowed by other I/O (CI)
	// can hold the next job longer than a short heartbeat timeout.
	worker.KeepAlive(200 * time.Millisecond)
	worker.Ready(1)
	for range n {
		id := client.Request(name, "reply-requested", []byte("x"))
		got := bt.Expect[*emqp.Request](worker)
		if got.MsgID != id {
			t.Fatalf("worker got %s, want %s", got.MsgID, id)
		}
		worker.Reply(id, nil)
		worker.Ready(1)
		if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != id {
			t.Fatalf("client got a REPLY for %s, want %s", r.OrigMsgID, id)
		}
	}
}

func rawDial(t *testing.T, endpoint string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// Hostile peers: none stops the broker or holds up the others.
func TestHostilePeers(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) {
		o.MaxFrameSize = 1 << 20
		o.HeartbeatInterval, o.HeartbeatTimeout = 200*time.Millisecond, 2*time.Second
	})

	// A frame header announcing 2^50 bytes, after a valid handshake.
	huge := rawDial(t, b.Frontend())
	huge.Write(zmtpHello("huge"))
	huge.Write(binary.BigEndian.AppendUint64([]byte{0x02}, 1<<50))
	huge.SetReadDeadline(time.Now().Add(bt.Wait))
	if _, err := io.Copy(io.Discard, huge); err != nil {
		t.Fatalf("the broker did not close a connection announcing a 2^50-byte frame: %v", err)
	}

	// One that connects and says nothing, on each endpoint.
	rawDial(t, b.Frontend())
	rawDial(t, b.Backend())

	// A worker that never reads: it offers slots and gets big jobs until
	// its socket buffers are full; its writer blocks, nobody else's does.
	// It is lost at the heartbeat timeout and its jobs go elsewhere.
	sleeper := rawDial(t, b.Backend())
	sleeper.Write(zmtpHello("sleeper"))
	sleeper.Write(zmtpMsg(emqp.Encode(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "big"}}})))
	for range 200 {
		sleeper.Write(zmtpMsg(emqp.Encode(&emqp.Ready{MsgID: emqp.NewID()})))
	}
	bigClient := bt.Dial(t, b.Frontend(), "big-client")
	var bigIDs []string
	for range 40 {
		bigIDs = append(bigIDs, bigClient.Request("big", "", make([]byte, 256<<10)))
	}

	// Two connections with one routing id: the newest gets the replies.
	first := bt.Dial(t, b.Frontend(), "twin")
	first.Request("twin", "", nil)
	second := bt.Dial(t, b.Frontend(), "twin")
	second.Request("twin", "", nil) // its ACK reaches the newest connection
	if m, ok := first.TryRecv(100 * time.Millisecond); ok {
		t.Fatalf("the older connection of a routing id got %T %+v", m, m)
	}

	// Meanwhile everyone else is served.
	roundTrips(t, b.Frontend(), b.Backend(), "normal", 200)

	// The sleeper's jobs reach a worker that reads.
	reader := bt.Dial(t, b.Backend(), "reader")
	reader.Inform("big")
	reader.KeepAlive(200 * time.Millisecond)
	reader.Ready(len(bigIDs))
	seen := map[string]bool{}
	for len(seen) < len(bigIDs) {
		r := bt.Expect[*emqp.Request](reader)
		seen[r.MsgID] = true
		reader.Reply(r.MsgID, nil)
	}
}

// A flood of connections that never finish their handshake takes at most
// max-connections places; the client and worker already connected go on,
// the rest are closed at once and counted, and the places come back when
// the flood ends.
func TestConnectionFloodIsBounded(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		fast(o)
		o.MaxConnections = 30
	}, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	var flood []net.Conn
	for i := range 300 {
		ep := []string{b.Frontend(), b.Backend()}[i%2]
		nc, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, nc)
	}
	metric := func(name string) float64 {
		f := bt.ScrapeMetrics(t, b)[name]
		if f == nil || len(f.Metric) == 0 {
			return -1
		}
		if c := f.Metric[0].GetCounter(); c != nil {
			return c.GetValue()
		}
		return f.Metric[0].GetGauge().GetValue()
	}
	bt.Eventually(t, "the flood refused", func() bool { return metric("emq_connections_refused_total") >= 300-30+2 })
	if n := metric("emq_connections"); n > 30 {
		t.Fatalf("%v connections hold places, max-connections is 30", n)
	}
	worker.Ready(1)
	id := client.Request("q", "", nil) // the connected keep working
	if j := bt.Expect[*emqp.Request](worker); j.MsgID != id {
		t.Fatalf("got %s, want %s", j.MsgID, id)
	}
	for _, nc := range flood {
		nc.Close()
	}
	bt.Eventually(t, "the flood's places back", func() bool { return metric("emq_connections") == 2 })
	late := bt.Dial(t, b.Frontend(), "late")
	late.Request("q", "", nil)
}
