// Package shards spreads queues over several replicated groups, each
// a shard: a replicated group as any other (its own etcd prefix, leader, standbys
// and fencing), on one etcd cluster shared with the others or on its
// own. One record in etcd, the placement, lists the shards (where their
// brokers listen, where their journals are) and says which shard serves
// which queue (emqp.RouteTable: explicit entries, else a stable hash of
// the queue's name over the shards listed in Hashed). It lives under its
// own prefix (Options.Prefix, on Options.Endpoints or the group's own
// etcd), and changes only by ChangePlacement: read it,
// change it, raise its version, and write it in a transaction that holds
// only if nobody wrote it since.
//
// A shard's leader serves by the placement it last read (it watches the
// key): it refuses jobs for another shard's queues with ERROR moved, and
// answers ROUTES with the table, so that clients and workers send each
// queue's jobs to its shard.
//
// A Member runs beside one shard's group (group.Options.Beside): it
// follows the placement, gives each leadership the routes to serve by,
// and carries out the moves of queues out of its shard (move.go) over
// the other shards' admin APIs (a Peer). Package shards uses the
// group's and the broker's exported API only, and reaches no admin
// package: cmd/emq gives it admin's client as the Peer.
package shards
