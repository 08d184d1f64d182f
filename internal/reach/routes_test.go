package reach_test

import (
	"context"
	"testing"
	"time"

	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/reach"
)

// Routes gets a shard's placement from its broker, an empty one from a
// broker that is no shard, and an error when no broker answers in time.
func TestRoutes(t *testing.T) {
	shards, table := bt.StartShards(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := reach.Routes(ctx, shards["b"].Backend(), "w-routes", reach.Security{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != table.Version || len(got.Shards) != 2 || got.Shards["a"].Frontend[0] != table.Shards["a"].Frontend[0] {
		t.Errorf("placement %+v, want %+v", got, table)
	}

	plain := bt.Start(t, "", nil)
	if got, err := reach.Routes(ctx, plain.Frontend(), "c-routes", reach.Security{}); err != nil || len(got.Shards) != 0 {
		t.Errorf("a broker that is no shard: %+v, %v; want an empty placement", got, err)
	}

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := reach.Routes(short, bt.FreeEndpoint(t), "nobody", reach.Security{}); err == nil {
		t.Error("no broker: no error")
	}
	if _, err := reach.Routes(ctx, plain.Frontend(), "x", reach.Security{User: "u"}); err == nil {
		t.Error("a PLAIN handshake with a broker that has no PLAIN users: no error")
	}
}
