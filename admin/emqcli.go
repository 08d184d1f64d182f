package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/addr"
	"github.com/eventmq/emq/internal/lograte"
	"github.com/eventmq/emq/internal/portmux"
	"github.com/eventmq/emq/internal/zmtp"
)

// EventMQ's emq-cli, its administrative shell, connects a DEALER to
// tcp://127.0.0.1:47293, EventMQ's router's administrative address and
// the admin listener's default, and sends '' eMQP/1.0 COMMAND msgid. The
// listener tells it from HTTP by its first byte (package portmux) and
// answers as EventMQ's router does:
//
//   - STATUS, ROUTER_SHOW_WORKERS, ROUTER_SHOW_SCHEDULERS: REPLY msgid
//     JSON, in EventMQ's shapes (emqCLIStatus and friends);
//   - DISCONNECT: ACK msgid, then Options.Shutdown (a graceful stop, as
//     SIGTERM);
//   - HELLO (emq-cli's first message): nothing, as EventMQ;
//   - anything else, or a message that is not eMQP/1.0: ERROR, and a log
//     line (rate-limited).
//
// emq-cli cannot send a token, so these are answered to loopback peers
// only: a connection from anywhere else is closed at once.

// emqCLIWait is how long a new connection has to say its first byte
// before it is taken for HTTP.
const emqCLIWait = 2 * time.Second

// emqCLIMaxFrame bounds an emq-cli frame: its messages are a few short
// frames.
const emqCLIMaxFrame = 64 << 10

// startEMQCLI serves emq-cli on ln.
func (s *Server) startEMQCLI(ln net.Listener) error {
	r, err := zmtp.Serve(&loopbackOnly{Listener: ln, log: s.log, said: lograte.New(1, "emq-cli connections refused")},
		zmtp.Options{MaxFrameSize: emqCLIMaxFrame, MaxFrames: 16, SendQueue: 16, Logger: s.log,
			Limit:   zmtp.NewConnLimit(16, 16),
			Receive: func(id string, frames [][]byte, _ zmtp.Held) { go s.emqCLI(id, frames) }})
	if err != nil {
		return err
	}
	s.cli = r
	return nil
}

// loopbackOnly closes the connections that do not come from loopback.
type loopbackOnly struct {
	net.Listener
	log  *slog.Logger
	said *lograte.Limiter
}

func (l *loopbackOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || addr.Loopback(c.RemoteAddr().String()) {
			return c, err
		}
		if l.said.Allow(l.log) {
			l.log.Warn("admin: an eMQP (emq-cli) connection from outside loopback refused: emq-cli's commands are answered on loopback only",
				"remote", c.RemoteAddr().String())
		}
		c.Close()
	}
}

// emqCLI answers one emq-cli message.
func (s *Server) emqCLI(id string, frames [][]byte) {
	refuse := func(ref, code, text string) {
		if s.cliLog.Allow(s.log) {
			s.log.Warn("admin: an eMQP (emq-cli) message refused", "code", code, "why", text)
		}
		_ = s.cli.Send(id, emqp.Encode(&emqp.Error{MsgID: emqp.NewID(), RefMsgID: ref, Code: code, Text: text}))
	}
	switch {
	case len(frames) < 4 || len(frames[0]) != 0:
		refuse("", emqp.CodeBadRequest, fmt.Sprintf("want '' eMQP/1.0 COMMAND msgid, got %d frames", len(frames)))
		return
	case string(frames[1]) != emqp.Version:
		refuse("", emqp.CodeUnsupportedVersion, "want eMQP/1.0, got "+emqp.QuoteName(string(frames[1])))
		return
	}
	cmd, msgid := string(frames[2]), frames[3]
	reply := func(body any) {
		js, err := json.Marshal(body)
		if err != nil {
			return
		}
		_ = s.cli.Send(id, [][]byte{{}, []byte(emqp.Version), []byte("REPLY"), msgid, js})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t := s.current()
	switch {
	case cmd == "DISCONNECT":
		s.log.Info("admin: DISCONNECT from emq-cli: stopping gracefully")
		_ = s.cli.Send(id, [][]byte{{}, []byte(emqp.Version), []byte("ACK"), msgid})
		if s.opts.Shutdown != nil {
			s.opts.Shutdown()
		}
	case cmd == "HELLO":
	case cmd != "STATUS" && cmd != "ROUTER_SHOW_WORKERS" && cmd != "ROUTER_SHOW_SCHEDULERS":
		refuse(string(msgid), emqp.CodeUnknownCommand, "the admin port answers STATUS, ROUTER_SHOW_WORKERS, ROUTER_SHOW_SCHEDULERS and DISCONNECT, not "+emqp.QuoteName(cmd))
	case t == nil:
		why := "no broker is served"
		if s.opts.Group != nil {
			why = "this broker is a standby; " + leads(s.opts.Group())
		}
		reply(map[string]string{"error": why})
	case cmd == "STATUS":
		body, err := emqCLIStatus(ctx, t.b)
		if err != nil {
			reply(map[string]string{"error": err.Error()})
			return
		}
		reply(body)
	case cmd == "ROUTER_SHOW_WORKERS":
		body, err := emqCLIWorkers(ctx, t.b)
		if err != nil {
			reply(map[string]string{"error": err.Error()})
			return
		}
		reply(body)
	default:
		body, err := emqCLISchedulers(ctx, t.b)
		if err != nil {
			reply(map[string]string{"error": err.Error()})
			return
		}
		reply(body)
	}
}

// emqCLIStatus is STATUS as EventMQ's router answers it, per queue:
// jobs in flight, jobs waiting for a worker, jobs done since the broker
// last held the queue, and, for both latencies, the age of its oldest
// job not done, in ms (EMQ keeps no per-job dispatch times for an
// average). EMQ counts no jobs per worker: that map is empty.
func emqCLIStatus(ctx context.Context, b *broker.Broker) (map[string]map[string]int64, error) {
	qs, err := b.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int64{}
	for _, k := range []string{"inflight_messages_by_queue", "latency_messages_by_queue", "max_latency_messages_by_queue",
		"waiting_messages_by_queue", "processed_messages_by_queue", "processed_messages_by_worker"} {
		out[k] = map[string]int64{}
	}
	for _, q := range qs {
		age := int64(q.OldestAge * 1000)
		out["inflight_messages_by_queue"][q.Name] = int64(q.InFlight)
		out["latency_messages_by_queue"][q.Name] = age
		out["max_latency_messages_by_queue"][q.Name] = age
		out["waiting_messages_by_queue"][q.Name] = int64(q.Pending)
		out["processed_messages_by_queue"][q.Name] = q.Replied
	}
	return out, nil
}

// emqCLIWorker is a worker as EventMQ's router keeps it: its queues as
// [weight, name], its last heartbeat (Unix seconds), its free slots.
type emqCLIWorker struct {
	Queues         [][2]any `json:"queues"`
	HB             float64  `json:"hb"`
	AvailableSlots int      `json:"available_slots"`
}

// emqCLIWorkers is ROUTER_SHOW_WORKERS: the workers by id, and each
// queue's workers as [weight, id], highest weight first.
func emqCLIWorkers(ctx context.Context, b *broker.Broker) (map[string]any, error) {
	ws, err := b.Workers(ctx)
	if err != nil {
		return nil, err
	}
	workers := map[string]emqCLIWorker{}
	queues := map[string][][2]any{}
	for _, w := range ws {
		ew := emqCLIWorker{Queues: [][2]any{}, HB: unixSeconds(w.LastHeartbeat), AvailableSlots: w.FreeSlots}
		for i, q := range w.Queues {
			ew.Queues = append(ew.Queues, [2]any{w.Weights[i], q})
			queues[q] = append(queues[q], [2]any{w.Weights[i], w.ID})
		}
		workers[w.ID] = ew
	}
	for _, list := range queues {
		slices.SortStableFunc(list, func(a, b [2]any) int { return b[0].(int) - a[0].(int) })
	}
	return map[string]any{"connected_workers": workers, "connected_queues": queues}, nil
}

// emqCLISchedulers is ROUTER_SHOW_SCHEDULERS: the schedulers by id, each
// with its last heartbeat (Unix seconds).
func emqCLISchedulers(ctx context.Context, b *broker.Broker) (map[string]any, error) {
	ss, err := b.Schedulers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]float64{}
	for _, s := range ss {
		out[s.ID] = map[string]float64{"hb": unixSeconds(s.LastHeartbeat)}
	}
	return map[string]any{"connected_schedulers": out}, nil
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

// splitEMQCLI shares ln between HTTP (returned) and emq-cli.
func (s *Server) splitEMQCLI(ln net.Listener) (net.Listener, error) {
	zl, hl := portmux.Split(ln, emqCLIWait)
	if err := s.startEMQCLI(zl); err != nil {
		ln.Close()
		return nil, err
	}
	return hl, nil
}
