package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// BulkError refuses an AppendBulk for one of its jobs: the first
// refused, its index in the bulk and why (Err wraps what Append would
// have answered: a *UniqueError, ErrInvalidJob, ErrTooLarge, a workflow's
// refusal...). Nothing of the bulk was stored.
type BulkError struct {
	Index int
	MsgID string
	Err   error
}

func (e *BulkError) Error() string {
	return fmt.Sprintf("bulk refused, nothing stored: job %d (%s): %v", e.Index, e.MsgID, e.Err)
}

func (e *BulkError) Unwrap() error { return e.Err }

// AppendBulk implements Journal: the jobs' Appends in one write, tried
// on a stage over the transaction (each sees those before it, as
// Appends one after another would) and put into it only once every one
// is taken, so that a refusal changes nothing for the other writes of
// the commit either.
func (jn *Core) AppendBulk(jobs []*Job, done func(dups []bool, err error)) {
	refuse := func(err error) {
		if done != nil {
			done(nil, err)
		}
	}
	ops := make([]*appendOp, len(jobs))
	var reads []Key
	size, total, keys := 0, 0, 0
	for i, j := range jobs {
		op, err := jn.newAppend(j)
		if err != nil {
			refuse(&BulkError{Index: i, MsgID: j.MsgID, Err: err})
			return
		}
		ops[i] = op
		reads = append(reads, op.reads...)
		size += len(j.Payload) + len(j.Headers)
		total += len(j.MsgID) + len(j.Queue) + len(j.Headers) + len(j.Payload) + len(j.ClientID) + len(j.Unique) + bulkRoom
		keys++
		if op.uk != nil {
			keys++
		}
	}
	switch {
	case jn.opts.MaxWriteKeys > 0 && keys > jn.opts.MaxWriteKeys:
		refuse(fmt.Errorf("%w: a bulk of %d jobs changes %d keys, over the %d one write of journal %s changes (a job is one key, two with a unique key)",
			ErrTooLarge, len(jobs), keys, jn.opts.MaxWriteKeys, jn.name))
		return
	case jn.opts.MaxWrite > 0 && total > jn.opts.MaxWrite:
		refuse(fmt.Errorf("%w: a bulk of %d jobs is about %d bytes, over the %d one write of journal %s holds",
			ErrTooLarge, len(jobs), total, jn.opts.MaxWrite, jn.name))
		return
	}
	jn.enqueue(write{
		apply: func(t Tx) error {
			s := &stage{Tx: t, latest: map[string]int{}}
			for i, op := range ops {
				if err := op.apply(s); err != nil {
					var je jobError
					if errors.As(err, &je) {
						return jobError{&BulkError{Index: i, MsgID: op.j.MsgID, Err: je.error}}
					}
					return err
				}
				if err := t.Err(); err != nil {
					return err
				}
			}
			return s.commit()
		},
		reads: reads,
		finish: func(err error) {
			var dups []bool
			if err == nil {
				dups = make([]bool, len(ops))
			}
			for i, op := range ops {
				if dup := op.finish(err); dups != nil {
					dups[i] = dup
				}
			}
			if done != nil {
				done(dups, err)
			}
		},
		size: size,
		// Not plain: a Complete held over (holdOver) never passes it.
		takes: true,
	})
}

// bulkRoom is what AppendBulk counts for a job's keys and framing beside
// its fields, when a write's bytes are bounded (etcd: one request).
const bulkRoom = 64

// MaxBulk is the most jobs one AppendBulk stores when none has a unique
// key or waits for another (a workflow's keys count too): 0 when only
// their size bounds it (bbolt). On etcd it is the server's
// --max-txn-ops (128 by default), and the bulk's bytes must fit in one
// request (--max-request-bytes less 8 KiB).
func (jn *Core) MaxBulk() int { return jn.opts.MaxWriteKeys }

// stage is a Tx that keeps a write's changes aside, over the
// transaction, until commit makes them in it, in order; reads see them.
// Until then a write of many parts (AppendBulk) may still drop them all.
type stage struct {
	Tx
	changes []change
	latest  map[string]int // bucket, a zero, key -> its last change
}

type change struct {
	bucket, key, val []byte
	del              bool
}

func stageKey(bucket, key []byte) string {
	return string(bucket) + "\x00" + string(key)
}

func (s *stage) staged(bucket, key []byte) (change, bool) {
	i, ok := s.latest[stageKey(bucket, key)]
	if !ok {
		return change{}, false
	}
	return s.changes[i], true
}

func (s *stage) Get(bucket, key []byte) []byte {
	if c, ok := s.staged(bucket, key); ok {
		return c.val // nil when deleted
	}
	return s.Tx.Get(bucket, key)
}

// Head is headOf through the stage: a value staged is given whole, as a
// Tx that is no HeadReader gives it.
func (s *stage) Head(bucket, key []byte) []byte {
	if c, ok := s.staged(bucket, key); ok {
		return c.val
	}
	return headOf(s.Tx, bucket, key)
}

func (s *stage) Gets(bucket []byte, keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	var rest [][]byte
	var at []int
	for i, k := range keys {
		if c, ok := s.staged(bucket, k); ok {
			out[i] = c.val
			continue
		}
		rest = append(rest, k)
		at = append(at, i)
	}
	if len(rest) > 0 {
		for n, v := range s.Tx.Gets(bucket, rest) {
			out[at[n]] = v
		}
	}
	return out
}

func (s *stage) Put(bucket, key, val []byte) error {
	s.latest[stageKey(bucket, key)] = len(s.changes)
	s.changes = append(s.changes, change{bucket: bucket, key: key, val: val})
	return nil
}

func (s *stage) Delete(bucket, key []byte) error {
	s.latest[stageKey(bucket, key)] = len(s.changes)
	s.changes = append(s.changes, change{bucket: bucket, key: key, del: true})
	return nil
}

// Scan merges the staged keys of bucket into the transaction's.
func (s *stage) Scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	var mine [][]byte
	for sk := range s.latest {
		b, k, _ := strings.Cut(sk, "\x00")
		if b == string(bucket) && bytes.Compare([]byte(k), from) >= 0 {
			mine = append(mine, []byte(k))
		}
	}
	slices.SortFunc(mine, bytes.Compare)
	stopped := false
	// emit gives fn the staged keys before limit (nil: all).
	emit := func(limit []byte) (bool, error) {
		for len(mine) > 0 && (limit == nil || bytes.Compare(mine[0], limit) < 0) {
			c, _ := s.staged(bucket, mine[0])
			mine = mine[1:]
			if c.del {
				continue
			}
			if more, err := fn(c.key, c.val); !more || err != nil {
				stopped = true
				return false, err
			}
		}
		return true, nil
	}
	err := s.Tx.Scan(bucket, from, func(k, v []byte) (bool, error) {
		if more, err := emit(k); !more || err != nil {
			return false, err
		}
		if len(mine) > 0 && bytes.Equal(mine[0], k) {
			return true, nil // staged: emitted with the next key, or at the end
		}
		more, err := fn(k, v)
		stopped = !more
		return more, err
	})
	if err != nil || stopped {
		return err
	}
	_, err = emit(nil)
	return err
}

// commit makes the staged changes in the transaction, in order.
func (s *stage) commit() error {
	for _, c := range s.changes {
		var err error
		if c.del {
			err = s.Tx.Delete(c.bucket, c.key)
		} else {
			err = s.Tx.Put(c.bucket, c.key, c.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
