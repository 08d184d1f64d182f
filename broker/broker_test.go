package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	if os.Getenv(workerChildEnv) != "" {
		runWorkerChild()
		return
	}
	leaks := append([]goleak.Option{goleak.IgnoreAnyFunction(boltstore.StoppedCheck), goleak.Cleanup(func(code int) {
		suite.print()
		os.Exit(code) // the cleanup replaces goleak's own exit
	})}, etcdtest.Leftovers...)
	goleak.VerifyTestMain(m, leaks...)
}

func fast(o *broker.Options) {
	o.HeartbeatInterval = 50 * time.Millisecond
	o.HeartbeatTimeout = 500 * time.Millisecond
	o.RetryBackoff = 10 * time.Millisecond
}

// storedJob opens the journal of a stopped broker and returns one job.
func storedJob(t *testing.T, b *bt.Broker, msgid string) (*store.Job, error) {
	t.Helper()
	return b.Journal(t).Get(msgid)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "client-1")
	worker := bt.Dial(t, b.Backend(), "worker-1")
	worker.Inform("default")
	worker.RecvHeartbeat() // right after the INFORM's ACK

	id := client.Request("default", "reply-requested,timeout:30", []byte("hello"))
	worker.Ready(1)
	req := bt.Expect[*emqp.Request](worker)
	if req.MsgID != id || req.Queue != "default" || string(req.Payload) != "hello" {
		t.Fatalf("worker got %+v, want the client's job %s", req, id)
	}
	if v, _ := req.Headers.Get("timeout"); v != "30" {
		t.Errorf("headers %q lost the client's timeout", req.Headers)
	}
	worker.Reply(id, []byte("world"))
	rep := bt.Expect[*emqp.Reply](client)
	if rep.OrigMsgID != id || string(rep.Payload) != "world" {
		t.Fatalf("client got %+v", rep)
	}

	// Without reply-requested the worker is still asked for a REPLY, and
	// the 5-frame REPLY of the seed protocol completes the job.
	id2 := client.Request("default", "", []byte("quiet"))
	worker.Ready(1)
	req = bt.Expect[*emqp.Request](worker)
	if !req.Headers.ReplyRequested() {
		t.Errorf("forwarded headers %q lack reply-requested", req.Headers)
	}
	worker.SendFrames([]byte(""), []byte("eMQP/1.0"), []byte("REPLY"), []byte(id2), []byte("done"))
	bt.Eventually(t, "both jobs replied", func() bool { return b.Stats().Replied == 2 })
	for _, msgid := range []string{id, id2} {
		if _, err := storedJob(t, b, msgid); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("job %s after its REPLY: %v, want ErrNotFound", msgid, err)
		}
	}
}

func TestDuplicateMsgIDIsOneJob(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("q")

	req := &emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: []byte("once")}
	for range 3 {
		client.Send(req)
		if ack := bt.Expect[*emqp.Ack](client); ack.AckedID != req.MsgID {
			t.Fatalf("ACK for %s", ack.AckedID)
		}
	}
	next := client.Request("q", "", []byte("next"))
	worker.Ready(2)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != req.MsgID {
		t.Fatalf("first job %s, want %s", got.MsgID, req.MsgID)
	}
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != next {
		t.Fatalf("second job %s, want %s (the resent msgid was dispatched twice)", got.MsgID, next)
	}
	if d := b.Stats().Duplicates; d != 2 {
		t.Errorf("duplicates = %d, want 2", d)
	}
}

func TestFIFOPerQueue(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	var ids []string
	for i := range 50 {
		ids = append(ids, client.Request("fifo", "", []byte(fmt.Sprint(i))))
	}
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("fifo")
	for i, id := range ids {
		worker.Ready(1)
		got := bt.Expect[*emqp.Request](worker)
		if got.MsgID != id {
			t.Fatalf("job %d: got %s, want %s", i, got.MsgID, id)
		}
		worker.Reply(got.MsgID, nil)
	}
}

func TestWeightedQueuesAndLRUWorkers(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	low := client.Request("low", "", nil)
	high := client.Request("high", "", nil)
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform(`[[10,"low"],[20,"high"]]`)
	worker.Ready(1)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != high {
		t.Fatalf("first dispatch %s (%s), want the high-weight queue's job", got.MsgID, got.Queue)
	}
	worker.Ready(1)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != low {
		t.Fatalf("second dispatch %s, want %s", got.MsgID, low)
	}

	// Two idle workers: jobs alternate, least recently used first.
	a := bt.Dial(t, b.Backend(), "a")
	a.Inform("lru")
	c := bt.Dial(t, b.Backend(), "b")
	c.Inform("lru")
	a.Ready(2)
	a.Sync()
	c.Ready(2)
	c.Sync()
	for range 2 {
		client.Request("lru", "", nil)
	}
	bt.Expect[*emqp.Request](a)
	bt.Expect[*emqp.Request](c)
}

func TestLostWorkerJobGoesToAnother(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"heartbeat timeout", "KBYE", "DISCONNECT"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := bt.Start(t, "", fast)
			client := bt.Dial(t, b.Frontend(), "c")
			first := bt.Dial(t, b.Backend(), "first")
			first.Inform("q")
			first.Ready(1)
			id := client.Request("q", "reply-requested", []byte("job"))
			if got := bt.Expect[*emqp.Request](first); got.MsgID != id {
				t.Fatal(got.MsgID)
			}
			second := bt.Dial(t, b.Backend(), "second")
			second.Inform("q")
			second.Ready(1)
			switch how {
			case "KBYE":
				first.Send(&emqp.Kbye{MsgID: emqp.NewID()})
			case "DISCONNECT":
				first.Send(&emqp.Disconnect{MsgID: emqp.NewID()})
			} // heartbeat timeout: first just stays silent
			second.KeepAlive(50 * time.Millisecond)
			got := bt.Expect[*emqp.Request](second)
			if got.MsgID != id {
				t.Fatalf("second worker got %s, want %s", got.MsgID, id)
			}
			// The lost worker's late REPLY is ignored: it neither completes
			// the job nor reaches the client.
			first.Reply(id, []byte("late"))
			first.Sync()
			if n := b.Stats().Ignored; n != 1 {
				t.Fatalf("ignored = %d after the late REPLY, want 1", n)
			}
			if n := b.Stats().Replied; n != 0 {
				t.Fatalf("the late REPLY completed the job (replied = %d)", n)
			}
			// The holder's REPLY completes it, and is the one the client gets.
			second.Reply(id, []byte("on time"))
			if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != id || string(r.Payload) != "on time" {
				t.Fatalf("client got REPLY %q for %s, want the holder's", r.Payload, r.OrigMsgID)
			}
			client.Sync() // and only that one
			if n := b.Stats().Replied; n != 1 {
				t.Fatalf("replied = %d, want 1", n)
			}
			j, err := storedJob(t, b, id)
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("job after REPLY: %+v %v", j, err)
			}
		})
	}
}

// A lost worker's jobs go back to the head of their queue oldest first,
// before the jobs that waited behind them.
func TestLostWorkersJobsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	first := bt.Worker(t, b.Backend(), "first", "q")
	var ids []string
	for i := range 5 {
		ids = append(ids, client.Request("q", "", []byte(fmt.Sprint(i))))
	}
	first.Ready(3)
	for _, id := range ids[:3] {
		if got := bt.Expect[*emqp.Request](first); got.MsgID != id {
			t.Fatalf("first worker got %s, want %s", got.MsgID, id)
		}
	}
	first.Send(&emqp.Kbye{MsgID: emqp.NewID()})
	// The goodbye and the next worker's READY come on two connections, in
	// no set order: the next worker comes once the first is gone.
	bt.Eventually(t, "the first worker's jobs back in their queue", func() bool {
		held, err := b.InFlight(context.Background(), "q")
		return err == nil && len(held) == 0
	})
	second := bt.Worker(t, b.Backend(), "second", "q")
	second.Ready(5)
	for i, id := range ids {
		if got := bt.Expect[*emqp.Request](second); got.MsgID != id {
			t.Fatalf("job %d after the loss: %s (%q), want %s", i, got.MsgID, got.Payload, id)
		}
	}
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	slow := bt.Worker(t, b.Backend(), "slow", "q")
	slow.Ready(1)
	id := client.Request("q", "timeout:1", nil)
	bt.Expect[*emqp.Request](slow)
	other := bt.Worker(t, b.Backend(), "other", "q")
	other.Ready(1)
	if got := bt.Expect[*emqp.Request](other); got.MsgID != id {
		t.Fatalf("after the timeout the other worker got %s, want %s", got.MsgID, id)
	}
	if n := b.Stats().TimedOut; n != 1 {
		t.Errorf("timed out = %d, want 1", n)
	}
	other.Reply(id, nil)
	bt.Eventually(t, "replied", func() bool { return b.Stats().Replied == 1 })
	j, err := storedJob(t, b, id)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("job after REPLY: %+v, %v", j, err)
	}
}

func TestFailRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	id := client.Request("q", "retry-count:2", []byte("doomed"))
	for attempt := 1; attempt <= 3; attempt++ {
		worker.Ready(1)
		got := bt.Expect[*emqp.Request](worker)
		if got.MsgID != id {
			t.Fatalf("attempt %d: got %s", attempt, got.MsgID)
		}
		if v, ok := got.Headers.Get(broker.HeaderAttempt); attempt > 1 && v != fmt.Sprint(attempt) || attempt == 1 && ok {
			t.Errorf("attempt %d: headers %q", attempt, got.Headers)
		}
		worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: id, Reason: fmt.Sprintf("boom %d", attempt)})
	}
	bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == 1 })
	if n := b.Stats().Retried; n != 2 {
		t.Errorf("retried = %d, want 2", n)
	}
	j, err := storedJob(t, b, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.Dead || j.Attempts != 3 || j.LastError != "boom 3" || string(j.Payload) != "doomed" {
		t.Fatalf("dead job %+v", j)
	}
}

func TestDefaultRetryCountIsThree(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	id := client.Request("q", "", nil)
	for range 4 {
		worker.Ready(1)
		bt.Expect[*emqp.Request](worker)
		worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: id, Reason: "no"})
	}
	bt.Eventually(t, "dead-lettered after 4 attempts", func() bool { return b.Stats().DeadLettered == 1 })
}

// Every error case of the shared wire vectors gets an ERROR with the right
// code, and the broker keeps serving.
func TestMalformedMessages(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	peer := bt.Dial(t, b.Frontend(), "bad")
	n := 0
	for _, v := range loadVectors(t) {
		if v.Error == "" || len(v.frames()) == 0 { // a ZMTP message has a frame
			continue
		}
		n++
		peer.SendFrames(v.frames()...)
		e := bt.Expect[*emqp.Error](peer)
		want := emqp.CodeBadRequest
		switch v.Error {
		case "version":
			want = emqp.CodeUnsupportedVersion
		case "command":
			want = emqp.CodeUnknownCommand
		}
		if e.Code != want || e.Text == "" {
			t.Errorf("%s: ERROR %q %q, want code %s", v.Name, e.Code, e.Text, want)
		}
	}
	if n < 10 {
		t.Fatalf("only %d error vectors", n)
	}
	peer.Request("q", "", []byte("still served"))
	if got := b.Stats().Errors(emqp.CodeBadRequest); got == 0 {
		t.Error("protocol errors are not counted")
	}
	// Bad values of known headers are refused before anything is stored.
	for _, h := range []string{"timeout:soon", "retry-count:-1", "delay:x"} {
		h, _ := emqp.ParseHeaders(h)
		peer.Send(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Headers: h})
		if e := bt.Expect[*emqp.Error](peer); e.Code != emqp.CodeBadRequest {
			t.Errorf("headers %q: ERROR %s", h, e.Code)
		}
	}
	if b.Stats().Acked != 1 {
		t.Errorf("acked %d jobs, want only the valid one", b.Stats().Acked)
	}
}

func TestFrameOverLimit(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.MaxFrameSize = 4096 })
	// The broker answers and hangs up as soon as it reads the frame's
	// header, so the peer's send may fail; the ERROR must still arrive,
	// for a frame just over the limit and for one far over it that is
	// still being written when the broker hangs up.
	for _, size := range []int{5000, 4 << 20} {
		big := bt.Dial(t, b.Frontend(), "big")
		id := emqp.NewID()
		_ = big.TrySend(emqp.Encode(&emqp.Request{MsgID: id, Queue: "q", Payload: make([]byte, size)})...)
		if e := bt.Expect[*emqp.Error](big); e.Code != emqp.CodeTooLarge || e.RefMsgID != id {
			t.Fatalf("%d bytes: ERROR %s for %q: %q; want too_large for %s", size, e.Code, e.RefMsgID, e.Text, id)
		}
	}
	other := bt.Dial(t, b.Frontend(), "other")
	other.Request("q", "", make([]byte, 4000))
}

// A message that could never fit in the receive buffer (each frame under
// max-frame-size) is refused too_large, naming max-receive-buffer.
func TestMessageOverTheReceiveBuffer(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.MaxReceiveBuffer = 1 << 20; o.MaxFrameSize = 4 << 20 })
	big := bt.Dial(t, b.Frontend(), "big")
	id := emqp.NewID()
	_ = big.TrySend(emqp.Encode(&emqp.Request{MsgID: id, Queue: "q", Payload: make([]byte, 1<<20)})...)
	if e := bt.Expect[*emqp.Error](big); e.Code != emqp.CodeTooLarge || e.RefMsgID != id || !strings.Contains(e.Text, "max-receive-buffer") {
		t.Fatalf("ERROR %s for %q: %q; want too_large for %s naming max-receive-buffer", e.Code, e.RefMsgID, e.Text, id)
	}
	bt.Dial(t, b.Frontend(), "other").Request("q", "", make([]byte, 4000))
}

// A job bigger than the journal takes is refused as too_large (not
// unavailable, which clients send again), and nothing is stored.
func TestJobOverJournalLimit(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.MaxJobSize = 2048 })
	client := bt.Dial(t, b.Frontend(), "c")
	id := emqp.NewID()
	client.Send(&emqp.Request{MsgID: id, Queue: "q", Payload: make([]byte, 3000)})
	if e := bt.Expect[*emqp.Error](client); e.Code != emqp.CodeTooLarge || e.RefMsgID != id || !strings.Contains(e.Text, "2048") {
		t.Fatalf("ERROR %+v, want too_large for %s naming the limit", e, id)
	}
	client.Request("q", "", make([]byte, 1000))
	if _, err := storedJob(t, b, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused job was stored: %v", err)
	}
}

// REQUESTs refused for their headers leave no queue behind: a client
// cannot grow the broker's memory with queue names.
func TestRefusedRequestsLeaveNoQueues(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	h, _ := emqp.ParseHeaders("timeout:soon")
	for i := range 50 {
		client.Send(&emqp.Request{MsgID: emqp.NewID(), Queue: fmt.Sprint("q", i), Headers: h})
		bt.Expect[*emqp.Error](client)
	}
	qs, err := b.Queues(context.Background())
	if err != nil || len(qs) != 0 {
		t.Fatalf("queues after 50 refused REQUESTs: %+v %v", qs, err)
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.MaxPending = 2 })
	client := bt.Dial(t, b.Frontend(), "c")
	client.Request("q", "", nil)
	client.Request("q", "", nil)
	id := emqp.NewID()
	client.Send(&emqp.Request{MsgID: id, Queue: "q"})
	if e := bt.Expect[*emqp.Error](client); e.Code != emqp.CodeQueueFull || e.RefMsgID != id {
		t.Fatalf("ERROR %+v, want queue_full for %s", e, id)
	}
	client.Request("other", "", nil) // other queues are not affected
	if _, err := storedJob(t, b, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused job was stored: %v", err)
	}
}

func TestRestartReplaysInOrder(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("q")
	var ids []string
	for i := range 5 {
		ids = append(ids, client.Request("q", "", []byte(fmt.Sprint(i))))
	}
	worker.Ready(1) // the first is in flight when the broker stops
	bt.Expect[*emqp.Request](worker)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if m, ok := worker.TryRecv(bt.Wait); !ok || m.Command() != emqp.CmdKbye {
		t.Fatalf("worker got %v at shutdown, want KBYE", m)
	}

	b2 := bt.Start(t, b.Dir, fast)
	w2 := bt.Dial(t, b2.Backend(), "w")
	w2.Inform("q")
	for i, id := range ids {
		w2.Ready(1)
		got := bt.Expect[*emqp.Request](w2)
		if got.MsgID != id || string(got.Payload) != fmt.Sprint(i) {
			t.Fatalf("replayed job %d: %s %q, want %s", i, got.MsgID, got.Payload, id)
		}
		w2.Reply(id, nil)
	}
	bt.Eventually(t, "all replied", func() bool { return b2.Stats().Replied == 5 })
	for _, id := range ids {
		if _, err := storedJob(t, b2, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

func TestUnknownPeerGetsNoAnswer(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	stranger := bt.Dial(t, b.Backend(), "stranger")
	stranger.Ready(1)
	stranger.Send(&emqp.Heartbeat{MsgID: emqp.NewID(), Time: "1"})
	stranger.Reply(emqp.NewID(), nil)
	stranger.Sync() // the only answer is the SYNC's ERROR
	if stranger.Beats != 0 {
		t.Fatalf("a peer that did not INFORM got %d HEARTBEATs", stranger.Beats)
	}
}

func TestResultKeptForTTL(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.ResultTTL = time.Hour })
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("q")
	worker.Ready(1)
	id := client.Request("q", "", nil)
	bt.Expect[*emqp.Request](worker)
	worker.Reply(id, []byte("the result"))
	bt.Eventually(t, "replied", func() bool { return b.Stats().Replied == 1 })
	if r, err := b.Journal(t).Result(id); err != nil || string(r) != "the result" {
		t.Fatalf("kept result %q, %v", r, err)
	}
}

// A job sent again after it was done, its result kept, does not run again:
// the client gets the ACK and, when it asked, the kept result as REPLY.
func TestResendAfterDone(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.ResultTTL = time.Hour })
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	h, _ := emqp.ParseHeaders("reply-requested")
	req := &emqp.Request{MsgID: emqp.NewID(), Queue: "q", Headers: h, Payload: []byte("once")}
	client.Send(req)
	bt.Expect[*emqp.Ack](client)
	bt.Expect[*emqp.Request](worker)
	worker.Reply(req.MsgID, []byte("the result"))
	if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != req.MsgID {
		t.Fatalf("REPLY for %s", r.OrigMsgID)
	}

	// The REPLY above, or the ACK, was lost: the client sends again.
	client.Send(req)
	if a := bt.Expect[*emqp.Ack](client); a.AckedID != req.MsgID {
		t.Fatalf("ACK for %s, want %s", a.AckedID, req.MsgID)
	}
	if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != req.MsgID || string(r.Payload) != "the result" {
		t.Fatalf("REPLY %+v, want the kept result of %s", r, req.MsgID)
	}
	// Without reply-requested the ACK is the whole answer.
	client.Send(&emqp.Request{MsgID: req.MsgID, Queue: "q", Payload: []byte("once")})
	if a := bt.Expect[*emqp.Ack](client); a.AckedID != req.MsgID {
		t.Fatalf("ACK for %s, want %s", a.AckedID, req.MsgID)
	}
	// The worker's next job is a new one: the done job did not run again.
	worker.Ready(1)
	next := client.Request("q", "", []byte("next"))
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != next {
		t.Fatalf("the worker got %s (%q), want the new job %s", got.MsgID, got.Payload, next)
	}
	if d := b.Stats().Dispatched; d != 2 {
		t.Fatalf("%d dispatches, want 2", d)
	}
	// Counted as what they are: two jobs stored, two resends.
	if a, d := b.Stats().Acked, b.Stats().Duplicates; a != 2 || d != 2 {
		t.Fatalf("acked %d, duplicates %d; want 2 and 2", a, d)
	}
}

// A delay or timeout of billions of seconds (the header parser takes up
// to about 292 years) is a very long wait, not an overflow: the delayed
// job waits, the other one does not time out at once.
func TestHugeDelayAndTimeout(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(2)
	client.Request("q", "delay:8000000000", nil)
	held := client.Request("q", "timeout:8000000000", nil)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != held {
		t.Fatalf("worker got %s, want the job without a delay", got.MsgID)
	}
	worker.Sync() // only that one
	qs, err := b.Queues(context.Background())
	if err != nil || len(qs) != 1 || qs[0].Delayed != 1 || qs[0].InFlight != 1 {
		t.Fatalf("queues %+v, %v; want one delayed and one in flight", qs, err)
	}
	if n := b.Stats().TimedOut; n != 0 {
		t.Fatalf("%d timed out", n)
	}
}
