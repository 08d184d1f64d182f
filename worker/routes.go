package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/reach"
)

// Shards. When queues are spread over several broker groups (shards),
// the worker asks its broker where its queues are served (ROUTES) and
// INFORMs each shard of its own part: one connection per shard, each
// with the whole Concurrency (so a worker serving queues of three shards
// runs up to three times Concurrency jobs at once). Each connection asks
// its shard again every routesEvery; when its queues' shards changed the
// worker stops its connections gracefully (running jobs finish) and
// makes the new ones. A broker that is not a shard answers with an empty
// table, and the worker serves all its queues there, as before, asking
// no more.

// routesEvery is how often a worker asks each shard it serves for the
// placement (ROUTES, on its connection), when its broker is a shard (a
// variable for tests).
var routesEvery = 2 * time.Second

// part is which queues a worker serves at which shard's backend
// endpoints (comma-joined).
type part map[string][]emqp.Queue

// child serves one shard's part of the worker's queues.
type child struct {
	queues []emqp.Queue
	stop   context.CancelFunc
	done   chan error
}

// routed runs the worker over the shards its queues are on, until ctx
// ends. When a placement moves its queues, the connections whose part
// changed stop gracefully (their running jobs finish and answer) while
// the new ones start at once, each with a routing id of its own.
func (w *Worker) routed(ctx context.Context) error {
	t, sharded := w.placement(ctx)
	seen := make(chan *emqp.RouteTable, 1)
	children := map[string]*child{}
	var ended []*child
	made, later := 0, false
	apply := func(parts part) {
		for broker, c := range children {
			if qs, ok := parts[broker]; !ok || !slices.Equal(qs, c.queues) {
				c.stop()
				ended = append(ended, c)
				delete(children, broker)
			}
		}
		for broker, qs := range parts {
			if children[broker] != nil {
				continue
			}
			one := *w
			one.opts.Broker = broker
			one.opts.Queues = make([]Queue, len(qs))
			for i, q := range qs {
				one.opts.Queues[i] = Queue{Name: q.Name, Weight: q.Weight}
			}
			if made++; later { // the one it replaces may still be answering
				one.opts.Identity = fmt.Sprintf("%s-%d", w.opts.Identity, made)
			}
			if sharded {
				one.routes = seen
				w.log.Info("worker: serving queues at their shard", "broker", broker, "queues", queueNames(qs))
			}
			cctx, stop := context.WithCancel(ctx)
			c := &child{queues: qs, stop: stop, done: make(chan error, 1)}
			go func() { c.done <- one.serve(cctx) }()
			children[broker] = c
		}
	}
	parts := w.partsOf(t)
	apply(parts)
	later = true
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case n := <-seen:
			if n.Version <= t.Version {
				continue
			}
			t = n
			if next := w.partsOf(n); !samePart(next, parts) {
				w.log.Info("worker: the shards of its queues changed", "placement", n.Version)
				parts = next
				apply(parts)
			}
		}
	}
	var first error
	for _, c := range children {
		ended = append(ended, c)
	}
	for _, c := range ended {
		c.stop()
		if err := <-c.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// placement asks the broker where queues are served; sharded reports
// that it is a shard. A broker that does not say (not EMQ's, or away
// for now) is taken for one that is no shard.
func (w *Worker) placement(ctx context.Context) (t *emqp.RouteTable, sharded bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	t, err := reach.Routes(ctx, w.opts.Broker, w.opts.Identity+"-routes", w.opts.Security)
	if err != nil || len(t.Shards) == 0 {
		return &emqp.RouteTable{}, false
	}
	return t, true
}

// partsOf says which of the worker's queues it serves at which shard
// under t; all at its own broker when t has no shards.
func (w *Worker) partsOf(t *emqp.RouteTable) part {
	qs := w.queues()
	slices.SortFunc(qs, func(a, b emqp.Queue) int { return strings.Compare(a.Name, b.Name) })
	p := part{}
	for _, q := range qs {
		broker := w.opts.Broker
		if owner := t.Owner(q.Name); owner != "" {
			broker = strings.Join(t.Shards[owner].Backend, ",")
		}
		p[broker] = append(p[broker], q)
	}
	return p
}

func samePart(a, b part) bool {
	return maps.EqualFunc(a, b, func(x, y []emqp.Queue) bool { return slices.Equal(x, y) })
}
