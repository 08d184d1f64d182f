package client_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
)

// SendBulk stores every job at once, in order, and returns their msgids;
// a refused job refuses the bulk with a *BulkError naming it, nothing
// stored.
func TestSendBulk(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	c := newClient(t, b.Frontend())
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	holder, err := c.Send(ctx, "q", nil, client.Unique("k", 0))
	if err != nil {
		t.Fatal(err)
	}

	jobs := make([]client.BulkJob, 8)
	for i := range jobs {
		jobs[i] = client.BulkJob{Queue: "q", Payload: fmt.Appendf(nil, "p%d", i)}
	}
	jobs[5].Options = []client.Option{client.Unique("k", 0)}
	_, err = c.SendBulk(ctx, jobs)
	var be *client.BulkError
	if !errors.As(err, &be) || be.Index != 5 || be.MsgID == "" || be.Code != emqp.CodeDuplicate ||
		!errors.Is(err, client.ErrDuplicate) || be.Holder != holder {
		t.Fatalf("SendBulk: %v (%+v), want a BulkError duplicate at job 5 naming the holder %s", err, be, holder)
	}

	jobs[5].Options = []client.Option{client.Header("timeout", "soon")}
	if _, err := c.SendBulk(ctx, jobs); !errors.As(err, &be) || be.Index != 5 || be.Code != emqp.CodeBadRequest {
		t.Fatalf("SendBulk: %v, want a BulkError bad_request at job 5", err)
	}

	jobs[5].Options = []client.Option{client.MsgID("mine-5"), client.Timeout(time.Minute)}
	ids, err := c.SendBulk(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(jobs) || ids[5] != "mine-5" {
		t.Fatalf("msgids %v, want %d with mine-5 at 5", ids, len(jobs))
	}
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(len(jobs) + 1)
	if r := bt.Expect[*emqp.Request](w); r.MsgID != holder {
		t.Fatalf("first job %s, want the one sent before the bulk", r.MsgID)
	}
	for i, id := range ids {
		if r := bt.Expect[*emqp.Request](w); r.MsgID != id || string(r.Payload) != fmt.Sprint("p", i) {
			t.Fatalf("job %d: %s %q, want %s", i, r.MsgID, r.Payload, id)
		}
	}
	if _, err := c.SendBulk(ctx, nil); err == nil {
		t.Fatal("an empty bulk was sent")
	}
	if _, err := c.SendBulk(ctx, []client.BulkJob{{Queue: "q", Options: []client.Option{client.MsgID("x")}}, {Queue: "q", Options: []client.Option{client.MsgID("x")}}}); err == nil {
		t.Fatal("a bulk with a msgid twice was sent")
	}
}

// A BULK not ACKed is sent again, the same: its msgid and its jobs'.
func TestSendBulkResendsTheSame(t *testing.T) {
	t.Parallel()
	got := make(chan *emqp.Bulk, 4)
	var router *zmtp.Router
	router, err := zmtp.Listen("tcp://127.0.0.1:0", zmtp.Options{Logger: bt.Logger(t), MaxFrames: 1000,
		Receive: func(id string, frames [][]byte, _ zmtp.Held) {
			m, err := emqp.Decode(frames)
			switch m := m.(type) {
			case *emqp.Routes: // not a shard
				_ = router.Send(id, emqp.Encode(&emqp.Routes{MsgID: m.MsgID, Table: []byte("{}")}))
			case *emqp.Bulk:
				got <- m
				if len(got) == 2 { // ACK the second only
					_ = router.Send(id, emqp.Encode(&emqp.Ack{MsgID: emqp.NewID(), AckedID: m.MsgID}))
				}
			default:
				t.Errorf("the fake broker got %T, %v", m, err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	c := newClient(t, router.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	jobs := []client.BulkJob{{Queue: "q", Payload: []byte("a")}, {Queue: "r", Payload: []byte("b")}}
	ids, err := c.SendBulk(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	first, second := <-got, <-got
	if !reflect.DeepEqual(first, second) || first.Jobs[0].MsgID != ids[0] || first.Jobs[1].MsgID != ids[1] {
		t.Fatalf("sent %+v, then %+v; want the same bulk twice, with the msgids returned %v", first, second, ids)
	}
}
