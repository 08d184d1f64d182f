package brokertest

import (
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
)

// StartShards starts a broker for each of names, each one shard of a
// placement that lists them all and spreads queues over none: place
// queues with table's Queues and hand the change to every shard with
// SetShards. The brokers keep their journals on their own disks, as a
// shard's group keeps its own in etcd.
func StartShards(t testing.TB, names ...string) (map[string]*Broker, *emqp.RouteTable) {
	t.Helper()
	table := &emqp.RouteTable{Version: 1, Shards: map[string]emqp.ShardRoute{}, Queues: map[string]string{}}
	for _, name := range names {
		table.Shards[name] = emqp.ShardRoute{Frontend: []string{FreeEndpoint(t)}, Backend: []string{FreeEndpoint(t)}}
	}
	shards := map[string]*Broker{}
	for _, name := range names {
		shards[name] = Start(t, "", func(o *broker.Options) {
			o.Frontend, o.Backend = table.Shards[name].Frontend[0], table.Shards[name].Backend[0]
			o.Shard, o.Routes = name, table
		})
	}
	return shards, table
}

// SetShards gives every shard a copy of table, one version up.
func SetShards(t testing.TB, shards map[string]*Broker, table *emqp.RouteTable) {
	t.Helper()
	table.Version++
	for name, b := range shards {
		next := *table
		next.Queues = map[string]string{}
		for q, s := range table.Queues {
			next.Queues[q] = s
		}
		if err := b.SetRoutes(&next); err != nil {
			t.Fatalf("shard %s: %v", name, err)
		}
	}
}
