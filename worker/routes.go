package worker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
)

// Shards. When queues are spread over several broker groups (shards),
// the worker asks its broker where its queues are served (ROUTES) and
// INFORMs each shard of its own part: one connection per shard, each
// with the whole Concurrency (so a worker serving queues of three shards
// runs up to three times Concurrency jobs at once). It asks again every
// routesEvery; when its queues' shards changed it stops its connections
// gracefully (running jobs finish) and makes the new ones. A broker that
// is not a shard answers with an empty table, and the worker serves all
// its queues there, as before.

// routesEvery is how often a worker reads the placement again (a
// variable for tests).
var routesEvery = 30 * time.Second

// part is which queues a worker serves at which shard's backend
// endpoints (comma-joined).
type part map[string][]emqp.Queue

// routed runs the worker over the shards its queues are on, until ctx
// ends.
func (w *Worker) routed(ctx context.Context) error {
	parts, again := w.parts(ctx)
	for {
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		errs := make(chan error, len(parts))
		for broker, qs := range parts {
			one := *w
			one.opts.Broker = broker
			one.opts.Queues = make([]Queue, len(qs))
			for i, q := range qs {
				one.opts.Queues[i] = Queue{Name: q.Name, Weight: q.Weight}
			}
			if len(parts) > 1 {
				w.log.Info("worker: serving queues at their shard", "broker", broker, "queues", queueNames(qs))
			}
			wg.Go(func() { errs <- one.serve(pctx) })
		}
		next, changed, every := parts, make(chan struct{}), routesEvery
		go func() { // read the placement again now and then
			if !again {
				return
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				if p, _ := w.parts(pctx); pctx.Err() == nil && !samePart(p, parts) {
					next = p
					close(changed)
					return
				}
			}
		}()
		select {
		case <-ctx.Done():
		case <-changed:
			w.log.Info("worker: the shards of its queues changed; reconnecting")
		}
		stop()
		wg.Wait()
		close(errs)
		if ctx.Err() != nil {
			for err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		}
		parts = next
	}
}

// parts asks the broker where the worker's queues are served; all of
// them at its own broker when it is no shard or does not say. again:
// the answer may change (a shard, or no answer), so ask again later.
func (w *Worker) parts(ctx context.Context) (p part, again bool) {
	qs := w.queues()
	slices.SortFunc(qs, func(a, b emqp.Queue) int { return strings.Compare(a.Name, b.Name) })
	all := part{w.opts.Broker: qs}
	c, err := client.New(client.Options{Broker: w.opts.Broker, Identity: w.opts.Identity + "-routes", Security: w.opts.Security, Logger: w.log})
	if err != nil {
		return all, false
	}
	defer c.Close()
	t, err := c.Routes(ctx)
	if err != nil {
		return all, true
	}
	if len(t.Shards) == 0 {
		return all, false
	}
	p = part{}
	for _, q := range qs {
		broker := w.opts.Broker
		if owner := t.Owner(q.Name); owner != "" {
			broker = strings.Join(t.Shards[owner].Backend, ",")
		}
		p[broker] = append(p[broker], q)
	}
	return p, true
}

func samePart(a, b part) bool {
	return maps.EqualFunc(a, b, func(x, y []emqp.Queue) bool { return slices.Equal(x, y) })
}
