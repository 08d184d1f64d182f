package broker

import (
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Workflows (the package doc's Workflows; store/workflow.go decides): a
// job that waits for other jobs or a batch is stored Waiting and ACKed,
// then forgotten here: only the journal holds it, so a million waiting
// jobs cost the broker no memory. The journal tells (Follow) after each
// commit which jobs it released and which it cancelled; released ones
// join their queues as a replayed job does.

// workflowChanged takes a commit's workflow changes, on the loop.
func (b *Broker) workflowChanged(c store.WorkflowChange) {
	now := time.Now()
	for _, sj := range c.Released {
		if b.jobs.get(sj.MsgID) != nil {
			continue // loaded already (a release the last run left to this one)
		}
		j := b.jobFromStore(sj, nil)
		b.jobs.set(j.id, j)
		b.adopt(j)
		b.emitJob(EventReleased, j, "")
		b.enqueue(j, now)
	}
	for _, sj := range c.Cancelled {
		reason := ""
		if n := len(sj.Trail); n > 0 {
			reason = sj.Trail[n-1].Reason
		}
		b.stats.Cancelled.Add(1)
		b.emit(Event{Kind: EventCancelled, Queue: sj.Queue, MsgID: sj.MsgID, Reason: reason})
	}
}

// cancelledOutside follows the cancel of a job that was not in memory
// when it was asked for: it waited, or was released meanwhile and joined
// its queue before the journal cancelled it, and must leave it.
func (b *Broker) cancelledOutside(sj *store.Job, reason string) {
	if j := b.jobs.get(sj.MsgID); j != nil && j.state != journaling {
		if j.holder != nil {
			b.send(j.holder.key, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: j.id})
		}
		b.unlink(j)
	}
	b.emit(Event{Kind: EventCancelled, Queue: sj.Queue, MsgID: sj.MsgID, Reason: reason})
}
