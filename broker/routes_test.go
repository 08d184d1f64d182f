package broker_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// The broker keeps its own copy of the placement it is given and hands
// out copies: changing either table afterwards, maps and endpoint lists
// included, changes nothing of how it routes.
func TestRoutesCopiedInAndOut(t *testing.T) {
	t.Parallel()
	shards, table := bt.StartShards(t, "a", "b")
	a := shards["a"]
	bFront := table.Shards["b"].Frontend[0]

	given := &emqp.RouteTable{Version: 2, Shards: map[string]emqp.ShardRoute{}, Queues: map[string]string{"mine": "a", "theirs": "b"}}
	for name, r := range table.Shards {
		given.Shards[name] = emqp.ShardRoute{Frontend: append([]string(nil), r.Frontend...), Backend: append([]string(nil), r.Backend...)}
	}
	if err := a.SetRoutes(given); err != nil {
		t.Fatal(err)
	}
	want := a.Routes()

	// The caller changes the table it gave, and the one it got.
	given.Queues["mine"] = "b"
	given.Shards["b"].Frontend[0] = "tcp://127.0.0.1:1"
	given.Moving = map[string]emqp.Move{"theirs": {From: "b", To: "a", Held: true}}
	got := a.Routes()
	got.Queues["theirs"] = "a"
	got.Shards["b"].Frontend[0] = "tcp://127.0.0.1:2"
	delete(got.Shards, "a")

	if now := a.Routes(); !reflect.DeepEqual(now, want) {
		t.Errorf("Routes after the callers' changes: %+v, want %+v", now, want)
	}
	peer := bt.Dial(t, a.Frontend(), "c")
	peer.Request("mine", "", []byte("stays here")) // ACKed: still a's
	peer.Send(&emqp.Request{MsgID: emqp.NewID(), Queue: "theirs", Payload: []byte("b's")})
	e := bt.Expect[*emqp.Error](peer)
	if e.Code != emqp.CodeMoved || !strings.Contains(e.Text, bFront) {
		t.Errorf("REQUEST for b's queue: ERROR %s %q, want moved to %s", e.Code, e.Text, bFront)
	}
}
