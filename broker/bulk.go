package broker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

// BULK: many jobs in one message, stored all in one commit and answered
// with one ACK (of the bulk's msgid), or none stored and one ERROR whose
// text names the first job refused (emqp.BulkJobText) with the code its
// REQUEST would have got. Each job is checked as its REQUEST is
// (readSent, placedElsewhere, max-pending counting the bulk's own jobs),
// then what Append does for one job AppendBulk does for all; a job's
// msgid the broker holds already is not stored again (the BULK sent
// again is ACKed), and what a landed job becomes is what a REQUEST's
// becomes (stored).
//
// A BULK with a job whose write is in progress (a REQUEST's, or another
// BULK's: the same BULK sent again) waits, its frames held, until that
// write lands, and is then handled afresh; a REQUEST for a job of a BULK
// being written is answered when the BULK lands, as for a REQUEST's.

// DefaultMaxBulk is the most jobs a BULK may hold when Options.MaxBulk is 0.
const DefaultMaxBulk = 10_000

// maxBulkLimit bounds Options.MaxBulk: a message of that many jobs has
// 4 frames for each.
const maxBulkLimit = 1_000_000

// parkedBulk is a BULK waiting for the write of one of its jobs.
type parkedBulk struct {
	from peerKey
	m    *emqp.Bulk
	held zmtp.Held
}

// maxFrames is the most frames a message may have: a BULK of MaxBulk
// jobs.
func (o *Options) maxFrames() int { return 4 + 4*o.maxBulk() }

func (o *Options) maxBulk() int {
	if o.MaxBulk == 0 {
		return DefaultMaxBulk
	}
	return o.MaxBulk
}

// bulk handles a client's BULK. Like a REQUEST it gets exactly one
// answer, ACK or ERROR; held is what its frames hold of the receive
// budget, kept until its write lands.
func (b *Broker) bulk(from peerKey, m *emqp.Bulk, held zmtp.Held) {
	b.stats.Received.Add(int64(len(m.Jobs)))
	b.handleBulk(from, m, held)
}

// handleBulk is bulk's work, done again for a BULK that waited.
func (b *Broker) handleBulk(from peerKey, m *emqp.Bulk, held zmtp.Held) {
	keep := false
	defer func() {
		if !keep {
			b.budget.Release(held)
		}
	}()
	refuse := func(i int, code, text string) {
		b.refuse(from, m.MsgID, code, emqp.BulkJobText(i, m.Jobs[i].MsgID, text))
	}
	switch {
	case b.phase != serving:
		b.refuse(from, m.MsgID, emqp.CodeUnavailable, ErrDraining.Error())
		return
	case len(m.Jobs) > b.opts.maxBulk():
		b.refuse(from, m.MsgID, emqp.CodeTooLarge, fmt.Sprintf("a BULK of %d jobs is over the broker's limit of %d (max-bulk)", len(m.Jobs), b.opts.maxBulk()))
		return
	case len(m.Jobs) > b.journalMaxBulk():
		b.refuse(from, m.MsgID, emqp.CodeTooLarge, fmt.Sprintf("a BULK of %d jobs is over what this journal stores in one transaction, %d jobs (on etcd: its --max-txn-ops); send smaller bulks", len(m.Jobs), b.journalMaxBulk()))
		return
	}
	seen := make(map[string]int, len(m.Jobs))
	added := map[string]int{} // new jobs of this bulk, by queue
	var news []int            // the jobs to store, by index
	var sents []sent
	for i := range m.Jobs {
		bj := &m.Jobs[i]
		if code, text := b.placedElsewhere(bj.Queue); code != "" {
			refuse(i, code, text)
			return
		}
		if k, ok := seen[bj.MsgID]; ok {
			refuse(i, emqp.CodeBadRequest, fmt.Sprintf("its msgid is job %d's too", k))
			return
		}
		seen[bj.MsgID] = i
		if j := b.jobs.get(bj.MsgID); j != nil {
			if j.state != journaling {
				continue // stored: ACKed with the rest
			}
			if len(b.bulksWaiting[j]) >= maxResent {
				refuse(i, emqp.CodeUnavailable, "this msgid is being stored and was sent again too often meanwhile; send the BULK again later")
				return
			}
			keep = true // handled again, and its frames released, once j's write lands
			b.bulksWaiting[j] = append(b.bulksWaiting[j], parkedBulk{from, m, held})
			return
		}
		s, err := readSent(bj.MsgID, bj.Headers)
		if err != nil {
			refuse(i, emqp.CodeBadRequest, err.Error())
			return
		}
		if name := b.undefinedLimiter(s.j); name != "" {
			refuse(i, emqp.CodeBadRequest, undefinedLimiterText(name))
			return
		}
		if b.opts.MaxPending > 0 {
			live := added[bj.Queue]
			if q := b.queues[bj.Queue]; q != nil {
				live += q.live
			}
			if live >= b.opts.MaxPending {
				refuse(i, emqp.CodeQueueFull, fmt.Sprintf("queue %q would hold %d jobs with this BULK's, the broker's limit (max-pending)", bj.Queue, live+1))
				return
			}
			added[bj.Queue]++
		}
		news = append(news, i)
		sents = append(sents, s)
	}
	if len(news) == 0 { // every job stored already: the BULK sent again
		b.stats.Duplicates.Add(int64(len(m.Jobs)))
		b.ack(from, m.MsgID)
		return
	}
	b.stats.Duplicates.Add(int64(len(m.Jobs) - len(news)))
	keep = true
	now := time.Now()
	jobs := make([]*job, len(news))
	sjs := make([]*store.Job, len(news))
	for k, i := range news {
		jobs[k], sjs[k] = b.startJob(from, sents[k], m.Jobs[i].Queue, m.Jobs[i].Payload, now)
	}
	b.journal.AppendBulk(sjs, func(dups []bool, err error) {
		waiting := make([]bool, len(sjs))
		seqs := make([]uint64, len(sjs))
		if err == nil {
			for k, sj := range sjs {
				waiting[k], seqs[k] = !dups[k] && sj.State == store.Waiting, sj.Seq
			}
		}
		b.bulkAppended(from, m, news, jobs, seqs, dups, waiting, err, held)
	})
	for k, i := range news {
		b.hold(jobs[k], m.Jobs[i].Payload) // the journal has its own copy
	}
}

// bulkAppended is an AppendBulk's outcome: one ACK and every job
// dispatchable, or one ERROR and none stored. news are the indices in m
// of jobs, the ones written.
func (b *Broker) bulkAppended(from peerKey, m *emqp.Bulk, news []int, jobs []*job, seqs []uint64, dups, waiting []bool, err error, held zmtp.Held) {
	b.journaling -= len(jobs)
	b.budget.Release(held)
	var unpark []parkedBulk
	defer func() {
		for _, p := range unpark {
			b.handleBulk(p.from, p.m, p.held)
		}
	}()
	if err != nil {
		var code, text string
		var be *store.BulkError
		if errors.As(err, &be) && be.Index >= 0 && be.Index < len(jobs) {
			code, text = b.writeRefusal(jobs[be.Index], be.Err)
			text = emqp.BulkJobText(news[be.Index], be.MsgID, text)
		} else {
			code, text = b.writeRefusal(jobs[0], err)
		}
		for _, j := range jobs {
			b.tr.refused(j, code, text)
			b.forget(j)
			for _, peer := range b.resent[j] { // a REQUEST for a job of it, sent meanwhile
				b.refuse(peer, j.id, emqp.CodeUnavailable, "the job came in BULK "+m.MsgID+", which was refused; send it again")
			}
			delete(b.resent, j)
			unpark = append(unpark, b.bulksWaiting[j]...)
			delete(b.bulksWaiting, j)
		}
		b.refuse(from, m.MsgID, code, text)
		return
	}
	b.ack(from, m.MsgID)
	now := time.Now()
	for k, j := range jobs {
		for _, peer := range b.resent[j] {
			b.ack(peer, j.id)
		}
		b.stats.Duplicates.Add(int64(len(b.resent[j])))
		if dups[k] {
			b.stats.Duplicates.Add(1)
		}
		delete(b.resent, j)
		unpark = append(unpark, b.bulksWaiting[j]...)
		delete(b.bulksWaiting, j)
		b.stored(j, seqs[k], dups[k], waiting[k], now)
	}
}

// unparkAfter handles again the BULKs that waited for j's write.
func (b *Broker) unparkAfter(j *job) {
	parked := b.bulksWaiting[j]
	delete(b.bulksWaiting, j)
	for _, p := range parked {
		b.handleBulk(p.from, p.m, p.held)
	}
}

// journalMaxBulk is the most jobs the journal stores in one AppendBulk
// (store.Core.MaxBulk: etcd's transaction limit), or no limit.
func (b *Broker) journalMaxBulk() int {
	if j, ok := b.journal.j.(interface{ MaxBulk() int }); ok && j.MaxBulk() > 0 {
		return j.MaxBulk()
	}
	return math.MaxInt
}
