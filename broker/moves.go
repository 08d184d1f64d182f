package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/eventmq/emq/store"
)

// A queue moved between shards (routes.go, emqp.Move) leaves its source
// as the jobs the source's journal lists, and arrives at its target by
// ImportJobs: each stored there as it was (store.Journal.Import), and,
// when pending, held in memory as a replayed job is. Both shards hold
// the queue meanwhile (canDispatch asks routes.held), so none of its
// jobs runs at either until the move's copy is done.

// ImportJobs stores jobs taken from another shard's journal, each as it
// was there (pending or dead, with its attempts), and returns how many
// were new: a msgid this broker holds already is left as it is, so an
// import may be repeated. A pending job joins its queue's tail in the
// order given; it is dispatched once its queue is not held by a move.
func (b *Broker) ImportJobs(ctx context.Context, jobs []*store.Job) (int, error) {
	for _, sj := range jobs {
		if sj.State != store.Pending && sj.State != store.Dead {
			return 0, fmt.Errorf("%w: job %s is %s: only pending and dead jobs are imported", store.ErrInvalidJob, sj.MsgID, sj.State)
		}
	}
	return change(ctx, b, func(reply func(int, error)) {
		left, n := len(jobs), 0
		var first error
		one := func(err error, fresh bool) {
			if err != nil && first == nil {
				first = err
			}
			if fresh {
				n++
			}
			if left--; left == 0 {
				reply(n, first)
			}
		}
		if left == 0 {
			reply(0, nil)
			return
		}
		for _, sj := range jobs {
			if b.jobs.get(sj.MsgID) != nil {
				one(nil, false)
				continue
			}
			b.journal.Import(sj, func(dup bool, err error) {
				fresh := err == nil && !dup
				if fresh && sj.State == store.Pending && b.jobs.get(sj.MsgID) == nil {
					j := b.jobFromStore(sj, nil)
					b.jobs.set(j.id, j)
					b.adopt(j)
					b.enqueue(j, time.Now())
				}
				if err != nil {
					b.noticeFence(err)
				}
				one(err, fresh)
			})
		}
	})
}

// ImportSchedule keeps a schedule taken from another shard as it was
// there (its next due time, fires, what is left, paused): one with its
// id already here is replaced.
func (b *Broker) ImportSchedule(ctx context.Context, ss *store.Schedule) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		s, err := scheduleFromStore(ss)
		if err != nil {
			reply(struct{}{}, fmt.Errorf("%w: %v", store.ErrBadSchedule, err))
			return
		}
		b.storeSchedule(ss, s, func(err error) { reply(struct{}{}, err) })
	})
	return err
}

// ForgetJobs deletes the jobs of queue among msgids that this broker
// holds, in any state, for a move between shards that sends what
// changed since it copied them (an admin's action, as RemoveJob): a
// msgid it does not hold, or of another queue, is left alone. It
// returns how many it deleted.
func (b *Broker) ForgetJobs(ctx context.Context, queue string, msgids []string) (int, error) {
	// Pending jobs are known in memory; the others (dead) are read.
	inMemory, err := query(ctx, b, func() []bool {
		mem := make([]bool, len(msgids))
		for i, id := range msgids {
			j := b.jobs.get(id)
			mem[i] = j != nil && j.q.name == queue
		}
		return mem
	})
	if err != nil {
		return 0, err
	}
	var mine []string
	for i, id := range msgids {
		if inMemory[i] {
			mine = append(mine, id)
		} else if j, err := b.journal.Get(id); err == nil && j.Queue == queue {
			mine = append(mine, id)
		}
	}
	return changeN(ctx, b, len(mine), func(each func(error)) {
		for _, id := range mine {
			if j := b.jobs.get(id); j != nil {
				if j.state == journaling {
					j.dropped = true
				} else {
					b.unlink(j)
				}
			}
			b.journal.Remove(id, func(_ bool, err error) {
				b.adminWriteFailed(err, "journal could not remove a moved job", id)
				each(err)
			})
		}
	})
}
