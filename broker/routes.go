package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/eventmq/emq/emqp"
)

// A broker that is one shard of several (Options.Shard) takes jobs only
// for the queues the placement puts on its shard. A REQUEST or SCHEDULE
// for another shard's queue gets ERROR moved naming that shard's
// endpoints and the placement's version, and stores nothing; a queue
// being moved gets ERROR unavailable (its source pauses it), as does a
// queue the placement gives to no shard. ROUTES is answered with the
// whole table, so that clients and workers route by it.
//
// The placement is a snapshot, swapped whole (SetRoutes, from the group
// that watches it in etcd): the loop reads it per message, nothing
// changes it in place. The broker keeps its own copy of each table it is
// given and hands out copies (Routes), so no caller holds the table the
// loop reads.

// routes is one placement, as the loop uses it.
type routes struct {
	shard  string
	table  *emqp.RouteTable
	answer []byte // the table in JSON, for ROUTES
}

// checkRoutes reports what keeps shard from serving under t.
func checkRoutes(shard string, t *emqp.RouteTable) error {
	switch {
	case t == nil:
		return fmt.Errorf("shard %s: no placement given", shard)
	case !emqp.ValidShardName(shard):
		return fmt.Errorf("shard %q: a name is 1 to 64 letters, digits, '-', '_' or '.'", shard)
	}
	if _, ok := t.Shards[shard]; !ok {
		return fmt.Errorf("shard %s is not in the placement (version %d); add it with emq shards add", shard, t.Version)
	}
	return t.Check()
}

// newRoutes checks a copy of t and makes it the routes of shard.
func newRoutes(shard string, t *emqp.RouteTable) (*routes, error) {
	if shard == "" {
		return &routes{answer: []byte("{}")}, nil
	}
	t = copyRoutes(t)
	if err := checkRoutes(shard, t); err != nil {
		return nil, err
	}
	answer, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return &routes{shard: shard, table: t, answer: answer}, nil
}

// SetRoutes changes the placement this shard's broker serves by. A
// placement that does not list its shard is refused: the broker keeps
// the one it has.
func (b *Broker) SetRoutes(t *emqp.RouteTable) error {
	if b.opts.Shard == "" {
		return fmt.Errorf("this broker is not a shard (no --shard)")
	}
	r, err := newRoutes(b.opts.Shard, t)
	if err != nil {
		return err
	}
	if old := b.routes.Load(); old.table != nil && old.table.Version > r.table.Version {
		return fmt.Errorf("placement version %d is older than the one served (%d)", r.table.Version, old.table.Version)
	}
	b.routes.Store(r)
	b.post(func() { // a queue a move held may go on
		for _, q := range b.queues {
			b.fill(q)
		}
	})
	return nil
}

// Routes is a copy of the placement this broker serves by; nil when it
// is not a shard.
func (b *Broker) Routes() *emqp.RouteTable { return copyRoutes(b.routes.Load().table) }

// copyRoutes is a deep copy of t: its maps and slices are its own.
func copyRoutes(t *emqp.RouteTable) *emqp.RouteTable {
	if t == nil {
		return nil
	}
	c := &emqp.RouteTable{Version: t.Version, Hashed: slices.Clone(t.Hashed),
		Queues: maps.Clone(t.Queues), Moving: maps.Clone(t.Moving)}
	if t.Shards != nil {
		c.Shards = make(map[string]emqp.ShardRoute, len(t.Shards))
		for name, r := range t.Shards {
			c.Shards[name] = emqp.ShardRoute{Frontend: slices.Clone(r.Frontend), Backend: slices.Clone(r.Backend), Admin: slices.Clone(r.Admin)}
		}
	}
	return c
}

// elsewhere reports whether a job for queue must be refused here, and
// refuses it: with ERROR moved when another shard serves queue, with
// ERROR unavailable while queue is moving or placed nowhere.
func (b *Broker) elsewhere(from peerKey, ref, queue string) bool {
	code, text := b.placedElsewhere(queue)
	if code == "" {
		return false
	}
	b.refuse(from, ref, code, text)
	return true
}

// placedElsewhere is elsewhere's refusal of a job for queue, or "" when
// this broker takes it.
func (b *Broker) placedElsewhere(queue string) (code, text string) {
	r := b.routes.Load()
	if r.table == nil {
		return "", ""
	}
	if m, ok := r.table.Moving[queue]; ok && m.Held && !m.Copied {
		return emqp.CodeUnavailable, fmt.Sprintf("queue %q is being moved from shard %s to shard %s; send it again shortly", queue, m.From, m.To)
	}
	owner := r.table.Owner(queue)
	switch owner {
	case r.shard:
		return "", ""
	case "":
		return emqp.CodeUnavailable, fmt.Sprintf("queue %q is placed on no shard (placement %d); place it with emq queues place", queue, r.table.Version)
	}
	return emqp.CodeMoved, emqp.MovedText(queue, owner, r.table.Shards[owner].Frontend, r.table.Version)
}

// held reports whether queue's jobs wait here for a move between
// shards (emqp.Move): the target holds what it is sent until the move is
// copied, the source its own from when the move holds the queue.
func (r *routes) held(queue string) bool {
	if r.table == nil || len(r.table.Moving) == 0 {
		return false
	}
	m, ok := r.table.Moving[queue]
	switch {
	case !ok:
		return false
	case m.From == r.shard:
		return m.Held || m.Copied
	}
	return !m.Copied
}

// answerRoutes answers ROUTES with the table ("{}" when not a shard),
// under the asker's msgid.
func (b *Broker) answerRoutes(from peerKey, m *emqp.Routes) {
	b.send(from, &emqp.Routes{MsgID: m.MsgID, Table: b.routes.Load().answer})
}
