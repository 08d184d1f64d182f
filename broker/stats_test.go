package broker_test

import (
	"slices"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// Stats hands out a copy: what a caller does with it, or keeps of it,
// neither changes the broker's counters nor follows them.
func TestStatsAreACopy(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	peer := bt.Dial(t, b.Frontend(), "c")
	peer.Request("q", "", []byte("one"))
	refused(t, peer)

	before := b.Stats()
	if before.Acked != 1 || before.Errors(emqp.CodeBadRequest) != 1 {
		t.Fatalf("acked %d, bad_request %d; want 1 and 1", before.Acked, before.Errors(emqp.CodeBadRequest))
	}
	before.Acked = 100
	peer.Request("q", "", []byte("two"))
	refused(t, peer)
	after := b.Stats()
	if after.Acked != 2 || after.Errors(emqp.CodeBadRequest) != 2 {
		t.Errorf("after a caller changed its copy: acked %d, bad_request %d; want 2 and 2", after.Acked, after.Errors(emqp.CodeBadRequest))
	}
	if n := before.Errors(emqp.CodeBadRequest); n != 1 {
		t.Errorf("a copy taken before the second ERROR says %d ERRORs bad_request, want 1", n)
	}

	// The lists every view reads are made afresh for each caller.
	codes := broker.ErrorCodes()
	codes[0] = "changed"
	if slices.Contains(broker.ErrorCodes(), "changed") {
		t.Error("ErrorCodes hands out the list it keeps")
	}
	cs := after.Counters()
	if cs[1].Name != "acked" || cs[1].Value != 2 {
		t.Errorf("counter 1: %+v, want acked 2", cs[1])
	}
}

// refused sends a REQUEST with a bad header and takes its ERROR.
func refused(t *testing.T, peer *bt.Peer) {
	t.Helper()
	h, err := emqp.ParseHeaders("timeout:soon")
	if err != nil {
		t.Fatal(err)
	}
	peer.Send(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Headers: h, Payload: []byte("x")})
	if e := bt.Expect[*emqp.Error](peer); e.Code != emqp.CodeBadRequest {
		t.Fatalf("ERROR %s, want %s", e.Code, emqp.CodeBadRequest)
	}
}
