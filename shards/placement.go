package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/emqp"
)

// Placement is the record of the shards and where each queue is served.
type Placement struct {
	Version int64                `json:"version"`
	Shards  map[string]Shard     `json:"shards"`
	Hashed  []string             `json:"hashed,omitempty"`
	Queues  map[string]string    `json:"queues,omitempty"`
	Moving  map[string]emqp.Move `json:"moving,omitempty"`
}

// Shard is where a shard's brokers listen, and where its journal is.
type Shard struct {
	emqp.ShardRoute
	Etcd   []string `json:"etcd,omitempty"` // its etcd's client URLs ("" = the placement's own)
	Prefix string   `json:"prefix"`         // its group's prefix (Options.Prefix)
}

// PlacementKey is the placement record's key under prefix.
func PlacementKey(prefix string) string { return prefix + "placement" }

// DefaultPlacementPrefix is where the placement is unless told otherwise.
const DefaultPlacementPrefix = "/emq/placement/"

// Table is the placement as clients and brokers route by it.
func (p *Placement) Table() *emqp.RouteTable {
	t := &emqp.RouteTable{Version: p.Version, Shards: map[string]emqp.ShardRoute{},
		Hashed: slices.Clone(p.Hashed), Queues: maps.Clone(p.Queues), Moving: maps.Clone(p.Moving)}
	for name, s := range p.Shards {
		t.Shards[name] = s.ShardRoute
	}
	return t
}

// Check reports the first thing wrong with the placement.
func (p *Placement) Check() error {
	for name, s := range p.Shards {
		if s.Prefix == "" {
			return fmt.Errorf("shard %s: needs the etcd prefix of its group", name)
		}
		for other, o := range p.Shards {
			if other != name && o.Prefix == s.Prefix && slices.Equal(o.Etcd, s.Etcd) {
				return fmt.Errorf("shards %s and %s: both have their journal at %s on the same etcd", name, other, s.Prefix)
			}
		}
	}
	return p.Table().Check()
}

// LoadPlacement reads the placement under prefix; an empty one at
// version 0 when there is none yet. rev is the key's revision, for a
// guarded change (0 = no key).
func LoadPlacement(ctx context.Context, cli *clientv3.Client, prefix string) (p *Placement, rev int64, err error) {
	resp, err := cli.Get(ctx, PlacementKey(prefix))
	if err != nil {
		return nil, 0, fmt.Errorf("placement at %s: %w", PlacementKey(prefix), err)
	}
	if len(resp.Kvs) == 0 {
		return &Placement{Shards: map[string]Shard{}}, 0, nil
	}
	p, err = decodePlacement(prefix, resp.Kvs[0].Value)
	return p, resp.Kvs[0].ModRevision, err
}

func decodePlacement(prefix string, b []byte) (*Placement, error) {
	var p Placement
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("placement at %s: not a placement record: %w", PlacementKey(prefix), err)
	}
	if p.Shards == nil {
		p.Shards = map[string]Shard{}
	}
	return &p, nil
}

// ErrPlacementChanged is ChangePlacement's error when the placement kept
// changing under it.
var ErrPlacementChanged = errors.New("the placement changed while it was being changed; try again")

// ChangePlacement applies change to the placement under prefix and
// writes it, one version up, if nobody wrote it meanwhile (else reads
// it and tries again, a few times). change's error leaves it as it was.
func ChangePlacement(ctx context.Context, cli *clientv3.Client, prefix string, change func(*Placement) error) (*Placement, error) {
	key := PlacementKey(prefix)
	for range 5 {
		p, rev, err := LoadPlacement(ctx, cli, prefix)
		if err != nil {
			return nil, err
		}
		if err := change(p); err != nil {
			return nil, err
		}
		p.Version++
		if err := p.Check(); err != nil {
			return nil, err
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return nil, fmt.Errorf("placement at %s: %w", key, err)
		}
		if resp.Succeeded {
			return p, nil
		}
	}
	return nil, ErrPlacementChanged
}

// watchPlacement calls seen with the placement under prefix: once read,
// then at each change, until ctx ends. A read or watch that fails is
// tried again (etcd away: the last placement seen stays in force).
func watchPlacement(ctx context.Context, cli *clientv3.Client, prefix string, log *slog.Logger, seen func(*Placement)) {
	key := PlacementKey(prefix)
	said := ""
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		p, rev, err := LoadPlacement(gctx, cli, prefix)
		cancel()
		if err == nil {
			seen(p)
			wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range cli.Watch(wctx, key, clientv3.WithRev(max(rev, 0)+1)) {
				if err = resp.Err(); err != nil {
					break
				}
				for _, ev := range resp.Events {
					if ev.Type != clientv3.EventTypePut {
						continue
					}
					if p, derr := decodePlacement(prefix, ev.Kv.Value); derr != nil {
						log.Warn("shard: a placement record that does not read; keeping the last one", "err", derr)
					} else {
						seen(p)
					}
				}
			}
			stop()
		}
		if err != nil && err.Error() != said {
			log.Warn("shard: cannot follow the placement; serving by the last one read", "err", err)
			said = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// PlaceQueue puts queue on shard in p: an explicit entry, or none when
// shard is "-" (back to the hash rule).
func PlaceQueue(p *Placement, queue, shard string) {
	if shard == "-" {
		delete(p.Queues, queue)
		return
	}
	if p.Queues == nil {
		p.Queues = map[string]string{}
	}
	p.Queues[queue] = shard
}
