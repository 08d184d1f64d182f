package emqp_test

import (
	"fmt"
	"testing"

	"github.com/eventmq/emq/emqp"
)

func TestRouteOwner(t *testing.T) {
	t.Parallel()
	three := &emqp.RouteTable{Hashed: []string{"a", "b", "c"}, Queues: map[string]string{"email": "c"}}
	if got := three.Owner("email"); got != "c" {
		t.Fatalf("explicit placement: owner %q, want c", got)
	}
	if got := (&emqp.RouteTable{}).Owner("q"); got != "" {
		t.Fatalf("no shards: owner %q, want none", got)
	}
	// The order shards are listed in does not matter, and each gets a
	// fair share of the queues.
	shuffled := &emqp.RouteTable{Hashed: []string{"c", "a", "b"}}
	count := map[string]int{}
	for i := range 3000 {
		q := fmt.Sprintf("queue-%d", i)
		o := three.Owner(q)
		if o2 := shuffled.Owner(q); o2 != o {
			t.Fatalf("%s: owner %s, or %s with the shards in another order", q, o, o2)
		}
		count[o]++
	}
	for _, s := range []string{"a", "b", "c"} {
		if count[s] < 800 || count[s] > 1200 {
			t.Fatalf("shares %v: want about 1000 each", count)
		}
	}
	// A fourth shard takes queues from the others, and only its own
	// share: no queue moves between the three.
	four := &emqp.RouteTable{Hashed: []string{"a", "b", "c", "d"}}
	moved := 0
	for i := range 3000 {
		q := fmt.Sprintf("queue-%d", i)
		before, after := shuffled.Owner(q), four.Owner(q)
		if before != after {
			if after != "d" {
				t.Fatalf("%s moved from %s to %s, not to the new shard", q, before, after)
			}
			moved++
		}
	}
	if moved < 600 || moved > 900 {
		t.Fatalf("%d of 3000 queues moved to the 4th shard, want about 750", moved)
	}
}

func TestMovedText(t *testing.T) {
	t.Parallel()
	eps := []string{"tcp://10.0.0.1:47290", "tcp://10.0.0.2:47290"}
	for _, q := range []string{"email", "a queue with spaces", `"quoted" (placement 9)`} {
		text := emqp.MovedText(q, "shard-b", eps, 42)
		m, ok := emqp.ParseMoved(text)
		if !ok || m.Shard != "shard-b" || m.Version != 42 || len(m.Endpoints) != 2 || m.Endpoints[1] != eps[1] {
			t.Fatalf("%q: read back %+v, %v", text, m, ok)
		}
	}
	if _, ok := emqp.ParseMoved("queue full"); ok {
		t.Fatal("a text that is not ERROR moved's read as one")
	}
}

func TestRouteTableCheck(t *testing.T) {
	t.Parallel()
	good := emqp.RouteTable{Shards: map[string]emqp.ShardRoute{"a": {Frontend: []string{"tcp://h:1"}, Backend: []string{"tcp://h:2"}}}, Hashed: []string{"a"}}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]emqp.RouteTable{
		"unlisted hashed": {Shards: good.Shards, Hashed: []string{"b"}},
		"unlisted queue":  {Shards: good.Shards, Queues: map[string]string{"q": "b"}},
		"bad name":        {Shards: map[string]emqp.ShardRoute{"a b": good.Shards["a"]}},
		"no backend":      {Shards: map[string]emqp.ShardRoute{"a": {Frontend: []string{"tcp://h:1"}}}},
		"comma endpoint":  {Shards: map[string]emqp.ShardRoute{"a": {Frontend: []string{"tcp://h:1,tcp://h:3"}, Backend: []string{"tcp://h:2"}}}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
