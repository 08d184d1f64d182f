package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
)

// BulkJob is one job of SendBulk.
type BulkJob struct {
	Queue   string
	Payload []byte
	// Options set the job's headers and msgid, as Send's do (Header,
	// Priority, Unique, Delay, After, Batch, MsgID, ...); OnAck is not
	// called.
	Options []Option
}

// BulkError is the broker's refusal of a SendBulk: none of its jobs was
// stored. Index (from 0) and MsgID name the first job refused, whose
// refusal Code and Text are the ones its Send would have got; Index is
// -1 when the refusal concerns the whole bulk (the broker is stopping,
// the bulk has more jobs than its max-bulk). errors.Is matches
// ErrDuplicate and the other sentinels of BrokerError by the code.
type BulkError struct {
	Index int
	MsgID string
	BrokerError
}

func (e *BulkError) Error() string {
	if e.Index < 0 {
		return "broker refused the bulk: " + e.Code + ": " + e.Text
	}
	return fmt.Sprintf("broker refused the bulk at job %d (msgid %s): %s: %s", e.Index, e.MsgID, e.Code, e.Text)
}

// Unwrap returns the refusal as a *BrokerError.
func (e *BulkError) Unwrap() error { return &e.BrokerError }

// SendBulk sends jobs in one BULK and returns their msgids once the
// broker has stored them all, in one commit: in the order given, each
// queue's jobs are its FIFO. If it refuses one, it stores none, and the
// error is a *BulkError naming the job. Like Send, the BULK is sent
// again (same msgids) until it is ACKed or ctx ends: the broker stores a
// msgid once, and ACKs a bulk whose jobs it has all stored. The broker
// bounds the jobs of one BULK (emq broker --max-bulk, 10,000 by
// default). Where queues are spread over shards, the bulk goes to its
// first job's shard, which refuses jobs of another shard's queues.
func (c *Client) SendBulk(ctx context.Context, jobs []BulkJob) ([]string, error) {
	if len(jobs) == 0 {
		return nil, errors.New("client: a bulk needs at least one job")
	}
	bulk := &emqp.Bulk{Jobs: make([]emqp.BulkJob, len(jobs))}
	ids := make([]string, len(jobs))
	seen := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if err := checkQueue(j.Queue); err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		var o sendOptions
		for _, opt := range j.Options {
			opt(&o)
		}
		if o.msgid == "" {
			o.msgid = emqp.NewID()
		}
		if len(o.msgid) > emqp.MaxIDLen {
			return nil, fmt.Errorf("client: job %d: msgid is %d bytes, over %d", i, len(o.msgid), emqp.MaxIDLen)
		}
		if k, ok := seen[o.msgid]; ok {
			return nil, fmt.Errorf("client: job %d: msgid %s is job %d's too", i, o.msgid, k)
		}
		seen[o.msgid] = i
		ids[i] = o.msgid
		bulk.Jobs[i] = emqp.BulkJob{MsgID: o.msgid, Queue: j.Queue, Headers: jobtrace.Inject(ctx, o.headers), Payload: j.Payload}
	}
	_, _, err := c.routed(ctx, jobs[0].Queue, false, nil, func(msgid string, _ emqp.Headers) emqp.Message {
		bulk.MsgID = msgid // the same on every resend and every shard
		return bulk
	})
	var be *BrokerError
	if errors.As(err, &be) {
		berr := &BulkError{Index: -1, BrokerError: *be}
		if i, id, text, ok := emqp.BulkJobOf(be.Text); ok && i < len(jobs) {
			berr.Index, berr.MsgID, berr.Text = i, id, text
		}
		return nil, berr
	}
	if err != nil {
		return nil, err
	}
	return ids, nil
}
