package shards

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Moving a queue between shards. `emq queues place` writes the move into
// the placement (emqp.Move: From, To); the leader of From carries it out,
// and the leader that follows it after a crash carries it on, since the
// move is in the placement, not in anyone's memory:
//
//  1. Copy live. From goes on serving the queue. It notes the msgid of
//     every write its journal takes from now on (track.go), then sends
//     its stored jobs of the queue (pending, delayed, dead; in queue
//     order) to To's leader (its admin API, import), which stores each as
//     it was, once, and holds them: To dispatches none of the queue and
//     answers its new jobs with ERROR moved (From still owns it). Jobs To
//     holds of the queue that were not sent (a copy a crash cut short)
//     are taken out of it. To must serve by the placement with the move
//     before it is sent anything.
//  2. Hold. A change of the placement marks the move held: neither shard
//     takes the queue's new jobs (ERROR unavailable, which clients
//     retry) nor dispatches any. From waits until its journal holds
//     every job it took, and for the jobs in flight (up to moveDrain),
//     then sends To what changed since step 1 (each job noted: sent again
//     as it is now, or taken out of To when it is gone), the queue's
//     schedules and its controls. Without the notes (a new leader after a
//     crash, or more changes than it keeps) it sends the whole queue.
//  3. Flip. One guarded change of the placement puts the queue on To and
//     marks the move copied: To serves it from then on, From answers its
//     jobs with ERROR moved.
//  4. Forget. From deletes what it holds of the queue (dispatching none
//     of it meanwhile), then ends the move in the placement.
//
// The queue is paused from step 2 to step 3 only. A crash of From's
// leader at any step leaves the move in the placement: the next leader
// loads the journal (what was in flight is pending again) and goes on
// from the step the placement names. A crash of To's leader fails From's
// requests until the next one serves; what it had stored is in its
// journal. Jobs in flight at From when a crash cut step 2 short are
// copied and may run again at To: at least once, as after any crash.

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
func (mb *Member) startMoves(ctx context.Context, b *broker.Broker, p *Placement) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.moving == nil {
		mb.moving = map[string]context.Context{}
	}
	for queue, m := range p.Moving {
		if m.From != mb.opts.Shard || mb.moving[queue] == ctx {
			continue
		}
		mb.moving[queue] = ctx
		go func() {
			defer func() {
				mb.mu.Lock()
				if mb.moving[queue] == ctx {
					delete(mb.moving, queue)
				}
				mb.mu.Unlock()
			}()
			mb.move(ctx, b, queue)
		}()
	}
}

// mover is one move's state in this leader: the changes it follows
// since its live copy began, and the msgids that copy sent.
type mover struct {
	mb     *Member
	b      *broker.Broker
	queue  string
	log    *slog.Logger
	ch     *changes
	stop   func() // stops following
	sent   map[string]bool
	copied time.Time // when the live copy began, for the log
}

// move carries out the move of queue until it ends or ctx does (this
// broker stops leading), trying each step again after a failure.
func (mb *Member) move(ctx context.Context, b *broker.Broker, queue string) {
	mv := &mover{mb: mb, b: b, queue: queue, log: mb.log.With("queue", queue)}
	defer func() {
		if mv.stop != nil {
			mv.stop()
		}
	}()
	start := time.Now()
	for ctx.Err() == nil {
		done, err := mv.step(ctx)
		if done {
			mv.log.Info("move: done", "took", time.Since(start).Round(time.Millisecond))
			return
		}
		if err != nil && ctx.Err() == nil {
			mv.log.Warn("move: a step failed; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// step takes the move one step on, as the placement now says; done when
// the move is over.
func (mv *mover) step(ctx context.Context) (done bool, err error) {
	mb, b, queue := mv.mb, mv.b, mv.queue
	p := mb.placement.Load()
	m, ok := p.Moving[queue]
	if !ok || m.From != mb.opts.Shard {
		return true, nil
	}
	// The broker must serve by this placement before the queue is read.
	if r := b.Routes(); r == nil || r.Version < p.Version {
		return false, fmt.Errorf("this broker does not serve by placement %d yet", p.Version)
	}
	change := func(fn func(*emqp.Move, *Placement)) error {
		_, err := ChangePlacement(ctx, mb.pcli.Load(), mb.opts.Prefix, func(p *Placement) error {
			cur, ok := p.Moving[queue]
			if !ok || cur != m {
				return errMoveChanged
			}
			fn(&cur, p)
			if _, ok := p.Moving[queue]; ok {
				p.Moving[queue] = cur
			}
			return nil
		})
		return err
	}
	switch {
	case !m.Held && !m.Copied:
		if err := mv.copyLive(ctx, p, m); err != nil {
			return false, err
		}
		if err := change(func(m *emqp.Move, _ *Placement) { m.Held = true }); err != nil {
			return errors.Is(err, errMoveChanged), err
		}
		return false, mb.waitPlacement(ctx, b, queue, func(m emqp.Move) bool { return m.Held })
	case !m.Copied:
		if err := mv.copyHeld(ctx, p, m); err != nil {
			return false, err
		}
		if err := change(func(m *emqp.Move, p *Placement) {
			delete(p.Queues, queue)
			if p.Table().Owner(queue) != m.To {
				PlaceQueue(p, queue, m.To)
			}
			m.Copied = true
		}); err != nil {
			return errors.Is(err, errMoveChanged), err
		}
		return false, mb.waitPlacement(ctx, b, queue, func(m emqp.Move) bool { return m.Copied })
	}
	// Copied: forget what is left here, then end the move.
	if err := forget(ctx, b, queue); err != nil {
		return false, err
	}
	err = change(func(_ *emqp.Move, p *Placement) { delete(p.Moving, queue) })
	return err == nil || errors.Is(err, errMoveChanged), err
}

// copyLive copies the queue to its target while it still serves here,
// following every change made meanwhile, then takes out of the target
// what it holds of the queue that was not sent (left by a copy a crash
// cut short).
func (mv *mover) copyLive(ctx context.Context, p *Placement, m emqp.Move) error {
	if mv.stop != nil {
		mv.stop()
	}
	tj := mv.mb.tracking()
	if tj == nil {
		return nil // nothing follows changes: the held step copies it all
	}
	mv.ch, mv.stop = tj.follow()
	mv.copied = time.Now()
	// Writes made before following began land before one made now: the
	// copy reads them all, and each later one is noted.
	if _, err := mv.b.ChangeQueue(ctx, mv.queue, broker.QueueChange{}); err != nil {
		return fmt.Errorf("waiting for the journal: %w", err)
	}
	to, err := mv.mb.leaderOf(ctx, p, m.To, p.Version)
	if err != nil {
		return err
	}
	mv.log.Info("move: copying the queue while it serves", "to", m.To)
	cs, err := copyQueue(ctx, mv.b, to, mv.queue)
	if err != nil {
		return err
	}
	mv.sent = cs.sent
	extra, err := notSent(ctx, to, mv.queue, cs.sent)
	if err == nil && len(extra) > 0 {
		_, err = to.ForgetJobs(ctx, mv.queue, extra)
	}
	if err != nil {
		return fmt.Errorf("taking earlier copies out of the target: %w", err)
	}
	mv.log.Info("move: copied while serving", "to", m.To, "jobs", cs.jobs,
		"reading", cs.reading.Round(time.Millisecond), "sending", cs.sending.Round(time.Millisecond), "earlier_copies_removed", len(extra))
	// What changed meanwhile goes too, still serving, a few rounds while
	// it shrinks: the hold then has only the last round's changes to send.
	for round := 1; round <= liveRounds; round++ {
		ids, purged, over, err := mv.changes(ctx)
		if err != nil {
			return err
		}
		if over || purged[mv.queue] {
			mv.sent = nil // the hold copies the whole queue
			return nil
		}
		n, gone, err := mv.sendChanges(ctx, to, ids)
		if err != nil {
			return err
		}
		mv.log.Info("move: sent what changed, still serving", "round", round, "changed", n, "gone", gone)
		if n < liveEnough {
			break
		}
	}
	return nil
}

// liveRounds bounds the rounds of changes a move sends while the queue
// still serves; after one of fewer than liveEnough changes it holds the
// queue.
const (
	liveRounds = 4
	liveEnough = 500
)

// copyHeld, with the queue held on both shards, sends what changed since
// the live copy (or, without one, the whole queue), its schedules and its
// controls.
func (mv *mover) copyHeld(ctx context.Context, p *Placement, m emqp.Move) error {
	b, queue := mv.b, mv.queue
	held := time.Now()
	if err := drain(ctx, b, queue); err != nil {
		return err
	}
	to, err := mv.mb.leaderOf(ctx, p, m.To, p.Version)
	if err != nil {
		return err
	}
	if err := copyControls(ctx, b, to, queue); err != nil {
		return err
	}
	if err := moveSchedules(ctx, b, to, queue); err != nil {
		return err
	}
	var ids map[string]touch
	purged, over := map[string]bool{}, true
	if mv.ch != nil && mv.sent != nil {
		if ids, purged, over, err = mv.changes(ctx); err != nil {
			return err
		}
	}
	if over || purged[queue] {
		cs, err := copyQueue(ctx, b, to, queue)
		if err != nil {
			return err
		}
		extra, err := notSent(ctx, to, queue, cs.sent)
		if err == nil && len(extra) > 0 {
			_, err = to.ForgetJobs(ctx, queue, extra)
		}
		if err != nil {
			return err
		}
		mv.log.Info("move: copied the held queue whole", "to", m.To, "jobs", cs.jobs, "took", time.Since(held).Round(time.Millisecond))
		return nil
	}
	n, gone, err := mv.sendChanges(ctx, to, ids)
	if err != nil {
		return err
	}
	mv.log.Info("move: sent what changed while copying", "to", m.To, "changed", n, "gone", gone,
		"held_for", time.Since(held).Round(time.Millisecond), "since_copy_began", time.Since(mv.copied).Round(time.Millisecond))
	return nil
}

// changes takes the changes noted so far, once the journal holds every
// write they name: each write is noted as the loop makes it, and a write
// made after that lands after them all.
func (mv *mover) changes(ctx context.Context) (ids map[string]touch, purged map[string]bool, over bool, err error) {
	ids, purged, over = mv.mb.tracking().taken(mv.ch)
	if _, err := mv.b.ChangeQueue(ctx, mv.queue, broker.QueueChange{}); err != nil {
		return nil, nil, false, fmt.Errorf("waiting for the journal: %w", err)
	}
	return ids, purged, over, nil
}

// sendChanges sends to the target what changed of the jobs ids names:
// each read here (32 at a time) and sent again as it is now, or taken out
// of the target when it is gone; how many it read and took out.
func (mv *mover) sendChanges(ctx context.Context, to Peer, ids map[string]touch) (read, took int, err error) {
	b, queue := mv.b, mv.queue
	var again []*store.Job
	var gone []string
	var mu sync.Mutex
	var failed error
	todo := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for id := range todo {
				j, err := b.JournalJob(id)
				mu.Lock()
				switch {
				case err == nil && j.Queue == queue && (j.State == store.Pending || j.State == store.Dead):
					again = append(again, j)
					if mv.sent[id] {
						gone = append(gone, id) // replaced: taken out first
					}
				case err != nil && !errors.Is(err, store.ErrNotFound):
					failed = err
				case mv.sent[id]:
					gone = append(gone, id)
				}
				mu.Unlock()
			}
		})
	}
	for id, how := range ids {
		if how == added && mv.sent[id] {
			continue // stored, then read by the live copy as it is now
		}
		read++
		todo <- id
	}
	close(todo)
	wg.Wait()
	if failed != nil {
		return read, 0, failed
	}
	slices.SortFunc(again, func(a, b *store.Job) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(gone) > 0 {
		if _, err := to.ForgetJobs(ctx, queue, gone); err != nil {
			return read, 0, fmt.Errorf("taking changed jobs out of the target: %w", err)
		}
		for _, id := range gone {
			delete(mv.sent, id)
		}
	}
	for len(again) > 0 {
		n := min(len(again), moveBatchJobs)
		if _, err := to.ImportJobs(ctx, queue, again[:n]); err != nil {
			return read, len(gone), fmt.Errorf("sending changed jobs: %w", err)
		}
		for _, j := range again[:n] {
			mv.sent[j.MsgID] = true
		}
		again = again[n:]
	}
	return read, len(gone), nil
}

// notSent lists the target's jobs of queue that are not in sent.
func notSent(ctx context.Context, to Peer, queue string, sent map[string]bool) ([]string, error) {
	var extra []string
	err := to.EachJobID(ctx, queue, func(msgid string) {
		if !sent[msgid] {
			extra = append(extra, msgid)
		}
	})
	return extra, err
}

var errMoveChanged = errors.New("the move changed meanwhile")

// waitPlacement waits until the broker serves by a placement whose move
// of queue is over, or is as reached says.
func (mb *Member) waitPlacement(ctx context.Context, b *broker.Broker, queue string, reached func(emqp.Move) bool) error {
	for ctx.Err() == nil {
		if r := b.Routes(); r != nil {
			if m, ok := r.Moving[queue]; !ok || reached(m) {
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

// leaderOf is the leader of shard that serves by placement version or
// a later one.
func (mb *Member) leaderOf(ctx context.Context, p *Placement, shard string, version int64) (Peer, error) {
	s, ok := p.Shards[shard]
	if !ok {
		return nil, fmt.Errorf("shard %s is not in the placement", shard)
	}
	to, _, err := FindLeader(ctx, s, mb.opts.Dial, version)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", shard, err)
	}
	return to, nil
}

// copyStats is what a copy did: jobs sent, and the time spent reading
// them here and sending them.
type copyStats struct {
	jobs             int
	sent             map[string]bool
	reading, sending time.Duration
}

// copyControls sends queue's controls to the shard behind to: its own,
// its tenants' defaults and each tenant's own settings. Named limiters
// are each shard's own: they stay.
func copyControls(ctx context.Context, b *broker.Broker, to Peer, queue string) error {
	qs, err := b.Queues(ctx)
	if err != nil {
		return err
	}
	for _, q := range qs {
		if q.Name == queue && (q.Paused || q.Concurrency > 0 || q.Rate > 0 || q.TenantConcurrency > 0 || q.TenantRate > 0 || q.TenantBurst > 0) {
			c := broker.QueueChange{Paused: &q.Paused, Concurrency: &q.Concurrency, Rate: &q.Rate, Burst: &q.Burst,
				TenantConcurrency: &q.TenantConcurrency, TenantRate: &q.TenantRate, TenantBurst: &q.TenantBurst}
			if _, err := to.ChangeQueue(ctx, queue, c); err != nil {
				return fmt.Errorf("sending the queue's controls: %w", err)
			}
		}
	}
	tenants, err := b.TenantSettings(ctx, queue)
	if err != nil {
		return err
	}
	for name, s := range tenants {
		c := broker.TenantChange{Concurrency: s.Concurrency, Rate: s.Rate, Burst: s.Burst, Weight: &s.Weight}
		for field, unset := range map[string]bool{"concurrency": s.Concurrency == nil, "rate": s.Rate == nil, "burst": s.Burst == nil} {
			if unset {
				c.Default = append(c.Default, field)
			}
		}
		if _, err := to.ChangeTenant(ctx, queue, name, c); err != nil {
			return fmt.Errorf("sending the settings of tenant %q: %w", name, err)
		}
	}
	return nil
}

// copyQueue sends every stored job of queue (pending, then dead, each in
// queue order) to the shard behind to.
func copyQueue(ctx context.Context, b *broker.Broker, to Peer, queue string) (copyStats, error) {
	cs := copyStats{sent: map[string]bool{}}
	if w, err := b.List(store.ListOptions{Queue: queue, State: store.Waiting, Limit: 1, NoPayloads: true}); err != nil {
		return cs, err
	} else if len(w.Jobs) > 0 {
		return cs, fmt.Errorf("queue %s has jobs waiting for others (workflows): they cannot leave their parents' shard", queue)
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
			for _, j := range batch {
				cs.sent[j.MsgID] = true
			}
		}
		sent <- err
	}()
	err := readQueue(b, queue, &cs.reading, batches)
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
func moveSchedules(ctx context.Context, b *broker.Broker, to Peer, queue string) error {
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
