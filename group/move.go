package group

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// Moving a queue between shards. `emq queues place` writes the move into
// the placement (emqp.Move: From, To); the leader of From carries it out,
// and the leader that follows it after a crash carries it on, since the
// move is in the placement, not in anyone's memory:
//
//  1. Hold. Both shards' brokers see the move: neither takes the queue's
//     new jobs (ERROR unavailable, which clients retry) nor dispatches
//     any of it. From waits for its jobs in flight (up to moveDrain).
//  2. Copy. From sends its stored jobs of the queue (pending, delayed,
//     dead; in queue order) to To's leader (its admin API, import), in
//     batches; To stores each as it was, once (a msgid it holds is left
//     alone), so a copy cut short is simply done again from the start.
//     Its controls go too. To must serve by the placement that holds the
//     queue before it is sent anything.
//  3. Flip. One guarded change of the placement puts the queue on To and
//     marks the move copied: To serves it from then on, From answers its
//     jobs with ERROR moved.
//  4. Forget. From deletes what it holds of the queue (dispatching none
//     of it meanwhile), then ends the move in the placement.
//
// A crash of From's leader at any step leaves the move in the placement:
// the next leader loads the journal (what was in flight is pending
// again), holds the queue, and goes on from step 1 or 4. A crash of To's
// leader fails From's requests until the next one serves; what it had
// stored is in its journal. Jobs in flight at From when a crash cut step
// 1 short are copied and may run again at To: at least once, as after
// any crash.

// moveDrain bounds the wait for the queue's jobs in flight at From
// before they are copied anyway (and may run twice).
const moveDrain = 30 * time.Second

// moveBatch bounds one import request, in jobs and in bytes.
const (
	moveBatchJobs  = 1000
	moveBatchBytes = 8 << 20
)

// startMoves starts carrying out the moves out of this shard that are
// not under way, while b leads.
func (g *Group) startMoves(ctx context.Context, b *broker.Broker, p *Placement) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moving == nil {
		g.moving = map[string]context.Context{}
	}
	for queue, m := range p.Moving {
		if m.From != g.opts.Shard || g.moving[queue] == ctx {
			continue
		}
		g.moving[queue] = ctx
		go func() {
			defer func() {
				g.mu.Lock()
				if g.moving[queue] == ctx {
					delete(g.moving, queue)
				}
				g.mu.Unlock()
			}()
			g.move(ctx, b, queue)
		}()
	}
}

// move carries out the move of queue until it ends or ctx does (this
// broker stops leading), trying each step again after a failure.
func (g *Group) move(ctx context.Context, b *broker.Broker, queue string) {
	log := g.log.With("queue", queue)
	start := time.Now()
	for ctx.Err() == nil {
		done, err := g.moveStep(ctx, b, queue, log)
		if done {
			log.Info("move: done", "took", time.Since(start).Round(time.Millisecond))
			return
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("move: a step failed; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// moveStep takes the move of queue one step on, as the placement now
// says; done when the move is over.
func (g *Group) moveStep(ctx context.Context, b *broker.Broker, queue string, log interface {
	Info(string, ...any)
}) (done bool, err error) {
	p := g.placement.Load()
	m, ok := p.Moving[queue]
	if !ok || m.From != g.opts.Shard {
		return true, nil
	}
	if !m.Copied {
		// The broker must serve by this placement (it holds the queue)
		// before its jobs are read.
		if r := b.Routes(); r == nil || r.Version < p.Version {
			return false, fmt.Errorf("this broker does not serve by placement %d yet", p.Version)
		}
		log.Info("move: holding the queue; copying it", "to", m.To)
		if err := drain(ctx, b, queue); err != nil {
			return false, err
		}
		to, err := g.leaderOf(ctx, p, m.To, p.Version)
		if err != nil {
			return false, err
		}
		cs, err := copyQueue(ctx, b, to, queue)
		if err != nil {
			return false, err
		}
		log.Info("move: copied; placing the queue on its new shard", "to", m.To, "jobs", cs.jobs,
			"reading", cs.reading.Round(time.Millisecond), "sending", cs.sending.Round(time.Millisecond))
		if _, err := ChangePlacement(ctx, g.pcli, g.opts.PlacementPrefix, func(p *Placement) error {
			if cur, ok := p.Moving[queue]; !ok || cur != m {
				return errMoveChanged
			}
			delete(p.Queues, queue)
			if p.Table().Owner(queue) != m.To {
				PlaceQueue(p, queue, m.To)
			}
			m.Copied = true
			p.Moving[queue] = m
			return nil
		}); err != nil {
			return errors.Is(err, errMoveChanged), err
		}
		return false, g.waitPlacement(ctx, b, queue)
	}
	// Copied: forget what is left here, then end the move.
	if r := b.Routes(); r == nil || r.Version < p.Version {
		return false, fmt.Errorf("this broker does not serve by placement %d yet", p.Version)
	}
	if err := forget(ctx, b, queue); err != nil {
		return false, err
	}
	_, err = ChangePlacement(ctx, g.pcli, g.opts.PlacementPrefix, func(p *Placement) error {
		if cur, ok := p.Moving[queue]; !ok || cur != m {
			return errMoveChanged
		}
		delete(p.Moving, queue)
		return nil
	})
	return err == nil || errors.Is(err, errMoveChanged), err
}

var errMoveChanged = errors.New("the move changed meanwhile")

// waitPlacement waits until the broker serves by the placement that has
// the queue copied.
func (g *Group) waitPlacement(ctx context.Context, b *broker.Broker, queue string) error {
	for ctx.Err() == nil {
		if r := b.Routes(); r != nil {
			if m, ok := r.Moving[queue]; !ok || m.Copied {
				return nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return ctx.Err()
}

// drain waits until the journal holds every job of the queue the broker
// took, and for the queue's jobs in flight, up to moveDrain.
func drain(ctx context.Context, b *broker.Broker, queue string) error {
	// A job taken just before the broker held the queue may still be on
	// its way into the journal: it would not be copied, and then be
	// forgotten. The journal applies writes in the order they were made,
	// so once a write made now is stored, so is every such job.
	if _, err := b.ChangeQueue(ctx, queue, broker.QueueChange{}); err != nil {
		return fmt.Errorf("waiting for the journal: %w", err)
	}
	deadline := time.Now().Add(moveDrain)
	for time.Now().Before(deadline) {
		held, err := b.InFlight(ctx, queue)
		if err != nil {
			return err
		}
		if len(held) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil // copied anyway: they may run again at the target
}

// leaderOf is an admin client of the leader of shard that serves by
// placement version or a later one.
func (g *Group) leaderOf(ctx context.Context, p *Placement, shard string, version int64) (*admin.Client, error) {
	s, ok := p.Shards[shard]
	if !ok {
		return nil, fmt.Errorf("shard %s is not in the placement", shard)
	}
	if len(s.Admin) == 0 {
		return nil, fmt.Errorf("shard %s lists no admin address to send the queue to (emq shards add --shard-admin)", shard)
	}
	var last error
	for _, addr := range s.Admin {
		a, err := admin.NewClient(admin.ClientOptions{Addr: addr, Token: g.opts.AdminToken, CA: g.opts.AdminCA})
		if err != nil {
			return nil, err
		}
		st, err := a.Stats(ctx)
		switch {
		case err != nil:
			last = fmt.Errorf("admin %s: %w", addr, err)
		case st.Group == nil || st.Group.State != "leader":
		case st.Group.Placement < version:
			last = fmt.Errorf("the leader of shard %s does not serve by placement %d yet", shard, version)
		default:
			return a, nil
		}
	}
	if last == nil {
		last = fmt.Errorf("no leader of shard %s answers at %v", shard, s.Admin)
	}
	return nil, last
}

// copyStats is what a copy did: jobs sent, and the time spent reading
// them here and sending them.
type copyStats struct {
	jobs             int
	reading, sending time.Duration
}

// copyQueue sends every stored job of queue (pending, then dead, each in
// queue order), its schedules and its controls to the shard behind to.
func copyQueue(ctx context.Context, b *broker.Broker, to *admin.Client, queue string) (copyStats, error) {
	var cs copyStats
	if w, err := b.List(store.ListOptions{Queue: queue, State: store.Waiting, Limit: 1, NoPayloads: true}); err != nil {
		return cs, err
	} else if len(w.Jobs) > 0 {
		return cs, fmt.Errorf("queue %s has jobs waiting for others (workflows): they cannot leave their parents' shard", queue)
	}
	qs, err := b.Queues(ctx)
	if err != nil {
		return cs, err
	}
	for _, q := range qs {
		if q.Name == queue && (q.Paused || q.Concurrency > 0 || q.Rate > 0) {
			c := broker.QueueChange{Paused: &q.Paused, Concurrency: &q.Concurrency, Rate: &q.Rate, Burst: &q.Burst}
			if _, err := to.ChangeQueue(ctx, queue, c); err != nil {
				return cs, fmt.Errorf("sending the queue's controls: %w", err)
			}
		}
	}
	if err := moveSchedules(ctx, b, to, queue); err != nil {
		return cs, err
	}
	// Reading here and sending there overlap: the next batch is read
	// while one is sent. Batches go one at a time, in queue order.
	batches := make(chan []*store.Job, 2)
	sent := make(chan error, 1)
	go func() {
		var err error
		for batch := range batches {
			if err != nil {
				continue // drain: the reader stops at the error
			}
			t0 := time.Now()
			if _, err = to.ImportJobs(ctx, queue, batch); err != nil {
				err = fmt.Errorf("sending %d jobs: %w", len(batch), err)
				continue
			}
			cs.sending += time.Since(t0)
			cs.jobs += len(batch)
		}
		sent <- err
	}()
	err = readQueue(b, queue, &cs.reading, batches)
	close(batches)
	if serr := <-sent; serr != nil {
		return cs, serr
	}
	return cs, err
}

// readQueue reads queue's stored jobs, pending then dead, each in queue
// order, into batches of at most moveBatchJobs and moveBatchBytes.
func readQueue(b *broker.Broker, queue string, took *time.Duration, out chan<- []*store.Job) error {
	var batch []*store.Job
	size := 0
	for _, state := range []store.State{store.Pending, store.Dead} {
		for after := ""; ; {
			t0 := time.Now()
			page, err := b.List(store.ListOptions{Queue: queue, State: state, After: after, Limit: moveBatchJobs})
			*took += time.Since(t0)
			if err != nil {
				return err
			}
			for _, j := range page.Jobs {
				if len(batch) == moveBatchJobs || size+len(j.Payload) > moveBatchBytes {
					out <- batch
					batch, size = nil, 0
				}
				batch = append(batch, j)
				size += len(j.Payload) + len(j.Headers) + 256
			}
			if after = page.Next; after == "" {
				break
			}
		}
	}
	if len(batch) > 0 {
		out <- batch
	}
	return nil
}

// moveSchedules sends each schedule of queue to the shard behind to, as
// it is, and removes it here (a schedule of to's making meanwhile is
// replaced; a fire made here meanwhile is a job, copied after, under the
// same msgid as to's fire of that due time).
func moveSchedules(ctx context.Context, b *broker.Broker, to *admin.Client, queue string) error {
	return eachSchedule(b, queue, func(s *store.Schedule) error {
		if to != nil {
			if err := to.ImportSchedule(ctx, s); err != nil {
				return fmt.Errorf("sending schedule %s: %w", s.ID, err)
			}
		}
		return b.RemoveSchedule(ctx, s.ID)
	})
}

// eachSchedule calls fn with each of queue's schedules.
func eachSchedule(b *broker.Broker, queue string, fn func(*store.Schedule) error) error {
	var mine []*store.Schedule
	for after := ""; ; {
		page, next, err := b.Schedules(after, 1000)
		if err != nil {
			return err
		}
		for _, s := range page {
			if s.Queue == queue {
				mine = append(mine, s)
			}
		}
		if after = next; after == "" {
			break
		}
	}
	for _, s := range mine {
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// forget deletes what this shard still holds of a queue that moved:
// its schedules, its pending and its dead jobs.
func forget(ctx context.Context, b *broker.Broker, queue string) error {
	if err := moveSchedules(ctx, b, nil, queue); err != nil {
		return err
	}
	if _, err := b.PurgeQueue(ctx, queue); err != nil {
		return err
	}
	for {
		page, err := b.List(store.ListOptions{Queue: queue, State: store.Dead, Limit: 1000, NoPayloads: true})
		if err != nil {
			return err
		}
		if len(page.Jobs) == 0 {
			return nil
		}
		ids := make([]string, len(page.Jobs))
		for i, j := range page.Jobs {
			ids[i] = j.MsgID
		}
		if _, err := b.RemoveDeadJobs(ctx, ids); err != nil {
			return err
		}
	}
}
