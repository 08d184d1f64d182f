package admin_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
)

// EventMQ's emq-cli speaks eMQP to the admin listener's port: STATUS,
// ROUTER_SHOW_WORKERS and ROUTER_SHOW_SCHEDULERS get a REPLY of JSON in
// EventMQ's shapes, DISCONNECT an ACK and a graceful stop; HTTP goes on
// on the same port.
func TestEMQCLIOnTheAdminPort(t *testing.T) {
	t.Parallel()
	stopped := make(chan struct{}, 1)
	b := bt.StartAdmin(t, "", bt.Fast, func(o *admin.Options) { o.Shutdown = func() { stopped <- struct{}{} } })
	w := bt.Worker(t, b.Backend(), "w1", "reports")
	w.Ready(3)
	s := bt.Dial(t, b.Backend(), "s1")
	s.InformScheduler()
	c := bt.Dial(t, b.Frontend(), "c")
	c.Request("waiting", "", []byte("x"))
	bt.Eventually(t, "the worker, the scheduler and the job are known", func() bool {
		st, err := b.State(context.Background())
		return err == nil && st.Workers == 1 && st.Schedulers == 1 && len(st.Queues) == 2
	})

	conn, err := zmtp.Dial(context.Background(), "tcp://"+b.AdminAddr(), zmtp.DialOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ask := func(cmd string) []byte {
		t.Helper()
		if err := conn.WriteMsgs([][]byte{{}, []byte(emqp.Version), []byte(cmd), []byte("admin:" + cmd)}); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		frames, err := conn.ReadMsg()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if len(frames) < 4 || string(frames[1]) != emqp.Version || string(frames[3]) != "admin:"+cmd {
			t.Fatalf("%s: answered %q", cmd, frames)
		}
		if cmd == "DISCONNECT" {
			if string(frames[2]) != "ACK" {
				t.Fatalf("DISCONNECT: answered %q, want an ACK", frames)
			}
			return nil
		}
		if len(frames) != 5 || string(frames[2]) != "REPLY" {
			t.Fatalf("%s: answered %q, want REPLY msgid JSON", cmd, frames)
		}
		return frames[4] // where emq-cli reads it
	}

	// emq-cli's HELLO gets nothing (its STATUS's REPLY comes first);
	// a message that is not eMQP/1.0, or an unknown command, an ERROR.
	if err := conn.WriteMsgs([][]byte{{}, []byte(emqp.Version), []byte("HELLO"), []byte("admin:hello")}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		frames [][]byte
		code   string
	}{
		{[][]byte{{}, []byte("eMQP/9"), []byte("STATUS"), []byte("m")}, emqp.CodeUnsupportedVersion},
		{[][]byte{{}, []byte(emqp.Version)}, emqp.CodeBadRequest},
		{[][]byte{{}, []byte(emqp.Version), []byte("PURGE"), []byte("m2")}, emqp.CodeUnknownCommand},
	} {
		if err := conn.WriteMsgs(c.frames); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		frames, err := conn.ReadMsg()
		if err != nil {
			t.Fatalf("%q: %v", c.frames, err)
		}
		m, err := emqp.Decode(frames)
		if e, ok := m.(*emqp.Error); err != nil || !ok || e.Code != c.code {
			t.Fatalf("%q answered %q (%v), want ERROR %s", c.frames, frames, err, c.code)
		}
	}
	var status map[string]map[string]int64
	if err := json.Unmarshal(ask("STATUS"), &status); err != nil {
		t.Fatal(err)
	}
	if status["waiting_messages_by_queue"]["waiting"] != 1 || status["inflight_messages_by_queue"] == nil ||
		status["processed_messages_by_worker"] == nil || len(status) != 6 {
		t.Fatalf("STATUS: %v", status)
	}
	var workers struct {
		Workers map[string]struct {
			Queues [][2]any `json:"queues"`
			HB     float64  `json:"hb"`
			Slots  int      `json:"available_slots"`
		} `json:"connected_workers"`
		Queues map[string][][2]any `json:"connected_queues"`
	}
	if err := json.Unmarshal(ask("ROUTER_SHOW_WORKERS"), &workers); err != nil {
		t.Fatal(err)
	}
	if w := workers.Workers["w1"]; w.Slots != 3 || len(w.Queues) != 1 || w.Queues[0][1] != "reports" || w.HB < float64(time.Now().Add(-time.Minute).Unix()) ||
		len(workers.Queues["reports"]) != 1 || workers.Queues["reports"][0][1] != "w1" {
		t.Fatalf("ROUTER_SHOW_WORKERS: %+v", workers)
	}
	var schedulers struct {
		Schedulers map[string]map[string]float64 `json:"connected_schedulers"`
	}
	if err := json.Unmarshal(ask("ROUTER_SHOW_SCHEDULERS"), &schedulers); err != nil || len(schedulers.Schedulers) != 1 || schedulers.Schedulers["s1"]["hb"] == 0 {
		t.Fatalf("ROUTER_SHOW_SCHEDULERS: %+v, %v", schedulers, err)
	}
	if code := bt.API(t, b, "GET", "/api/v1/stats", "", nil); code != 200 {
		t.Fatalf("HTTP on the same port beside emq-cli: %d", code)
	}
	select {
	case <-stopped:
		t.Fatal("stopped before DISCONNECT")
	default:
	}
	ask("DISCONNECT")
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("DISCONNECT did not ask for a graceful stop")
	}
}

// An emq-cli connection from outside loopback is closed: emq-cli sends
// no token, and the admin API needs one there.
func TestEMQCLIOnlyFromLoopback(t *testing.T) {
	t.Parallel()
	fl := &fakeListener{conns: make(chan net.Conn, 3)}
	var closed []string
	for _, remote := range []string{"10.1.2.3:5000", "192.168.0.7:6000", "[::1]:5000"} {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		fl.conns <- &remoteConn{Conn: a, remote: remote, closed: &closed}
	}
	c, err := admin.LoopbackOnly(fl).Accept()
	if err != nil || c.RemoteAddr().String() != "[::1]:5000" || strings.Join(closed, ",") != "10.1.2.3:5000,192.168.0.7:6000" {
		t.Fatalf("accepted %v (%v); closed %v: want only [::1]:5000 accepted, the others closed", c, err, closed)
	}
}

type fakeListener struct{ conns chan net.Conn }

func (f *fakeListener) Accept() (net.Conn, error) { return <-f.conns, nil }
func (f *fakeListener) Close() error              { return nil }
func (f *fakeListener) Addr() net.Addr            { return &net.TCPAddr{} }

type remoteConn struct {
	net.Conn
	remote string
	closed *[]string
}

func (r *remoteConn) RemoteAddr() net.Addr {
	ap := netip.MustParseAddrPort(r.remote)
	return net.TCPAddrFromAddrPort(ap)
}

func (r *remoteConn) Close() error {
	*r.closed = append(*r.closed, r.remote)
	return r.Conn.Close()
}
