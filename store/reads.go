package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Load implements Journal. It walks the pending index in one read
// transaction, reading the jobs of loadChunk entries at a time; each job
// is decoded (copied) only when fn is called, and its payload not at all.
// A large record a Peeker gives unchecked is checked whole only if its
// fields do not decode; otherwise when its payload is read (dispatch),
// which sets it aside if it fails: a restart does not read every byte of
// a backlog of large jobs.
func (jn *Core) Load(fn func(*Job) error) error {
	return jn.view(func(t Tx) error {
		var keys, ids [][]byte
		flush := func() error {
			recs, checked := peekAll(t, BucketJobs, ids)
			for i, rec := range recs {
				j, err := jn.indexed(t, BucketPending, rec, keys[i], ids[i], false)
				if err != nil && !checked[i] {
					j, err = jn.indexed(t, BucketPending, t.Get(BucketJobs, ids[i]), keys[i], ids[i], false)
				}
				if err != nil {
					return err
				}
				if j == nil {
					continue // damaged, or not stored: moved aside, never loaded
				}
				if err := fn(j); err != nil {
					return err
				}
			}
			keys, ids = keys[:0], ids[:0]
			return nil
		}
		err := t.Scan(BucketPending, nil, func(k, id []byte) (bool, error) {
			keys, ids = append(keys, k), append(ids, id)
			if len(ids) < jn.opts.LoadChunk {
				return true, nil
			}
			return true, flush()
		})
		if err == nil {
			err = flush()
		}
		if err == nil {
			err = t.Err()
		}
		return err
	})
}

// peekAll is Gets, through Peek when t is a Peeker; checked says which
// values were checked.
func peekAll(t Tx, bucket []byte, keys [][]byte) ([][]byte, []bool) {
	checked := make([]bool, len(keys))
	p, ok := t.(Peeker)
	if !ok {
		for i := range checked {
			checked[i] = true
		}
		return t.Gets(bucket, keys), checked
	}
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i], checked[i] = p.Peek(bucket, k)
	}
	return vals, checked
}

// indexed returns the job an entry (k -> id) of the index bucket names,
// from its record rec; nil when the record failed its check or is not
// stored: either is moved aside (quarantine.go).
func (jn *Core) indexed(t Tx, bucket []byte, rec, k, id []byte, withPayload bool) (*Job, error) {
	if rec == nil {
		if !isDamaged(t, BucketJobs, id) {
			jn.noteDamage([]Damage{{Bucket: bucket, Key: bytes.Clone(k), Reason: fmt.Sprintf("it names job %q, which is not stored", id)}})
		}
		return nil, nil
	}
	j, err := decodeJob(id, rec, withPayload)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", jn.name, err)
	}
	return j, nil
}

// isDamaged reports whether t found key of bucket damaged.
func isDamaged(t Tx, bucket, key []byte) bool {
	for _, d := range t.Damaged() {
		if bytes.Equal(d.Bucket, bucket) && bytes.Equal(d.Key, key) {
			return true
		}
	}
	return false
}

// damagedErr is the error about a damaged value of bucket, as t found it.
func (jn *Core) damagedErr(t Tx, bucket, key []byte) error {
	for _, d := range t.Damaged() {
		if bytes.Equal(d.Bucket, bucket) && bytes.Equal(d.Key, key) {
			return fmt.Errorf("%w: journal %s: %s", ErrDamaged, jn.name, d)
		}
	}
	return nil
}

// Get implements Journal.
func (jn *Core) Get(msgid string) (*Job, error) {
	var j *Job
	err := jn.view(func(t Tx) error {
		rec := t.Get(BucketJobs, []byte(msgid))
		if err := t.Err(); err != nil {
			return err
		}
		if err := jn.damagedErr(t, BucketJobs, []byte(msgid)); err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("%w: %s", ErrNotFound, msgid)
		}
		var err error
		j, err = decodeJob([]byte(msgid), rec, true)
		return err
	})
	return j, err
}

// Payloads implements Journal: one read transaction; each payload is
// copied out of the record, nothing else of it is decoded, and Bolt
// gives back the pages a large one lay on (pages_linux.go).
func (jn *Core) Payloads(msgids []string, fn func(i int, payload []byte, err error)) error {
	return jn.view(func(t Tx) error {
		ids := make([][]byte, len(msgids))
		for i, msgid := range msgids {
			ids[i] = []byte(msgid)
		}
		recs := t.Gets(BucketJobs, ids)
		if err := t.Err(); err != nil {
			return err
		}
		for i, msgid := range msgids {
			rec := recs[i]
			if rec == nil {
				err := jn.damagedErr(t, BucketJobs, ids[i])
				if err == nil {
					err = fmt.Errorf("%w: %s", ErrNotFound, msgid)
				}
				fn(i, nil, err)
				continue
			}
			p, err := payloadOf([]byte(msgid), rec)
			if err != nil {
				err = fmt.Errorf("journal %s: %w", jn.name, err)
			}
			c := clone(p)
			t.Release(p)
			fn(i, c, err)
		}
		return nil
	})
}

// Result implements Journal.
func (jn *Core) Result(msgid string) ([]byte, error) {
	var out []byte
	err := jn.view(func(t Tx) error {
		v := t.Get(BucketResults, []byte(msgid))
		if err := t.Err(); err != nil {
			return err
		}
		if err := jn.damagedErr(t, BucketResults, []byte(msgid)); err != nil {
			return err
		}
		if v != nil && len(v) < 8 {
			return fmt.Errorf("%w: journal %s: result of %s is %d bytes, too short for its expiry", ErrCorrupt, jn.name, msgid, len(v))
		}
		if valueEncrypted(BucketResults, v) { // read without the wrapper: no keys
			return fmt.Errorf("%w: journal %s: the result of %s is encrypted, and the journal was opened without its keys", ErrKeys, jn.name, msgid)
		}
		if v == nil || int64(binary.BigEndian.Uint64(v[:8])) < time.Now().UnixNano() {
			return fmt.Errorf("%w: no result kept for %s", ErrNotFound, msgid)
		}
		if rec := t.Get(BucketJobs, []byte(msgid)); len(rec) > recState && State(rec[recState]) == Cancelled {
			return fmt.Errorf("%w: job %s was cancelled: it has no result", ErrNotFound, msgid)
		}
		out = bytes.Clone(v[8:])
		return nil
	})
	return out, err
}

// List implements Journal. The cursor names the last job shown, by its
// state's index and key; a queue's jobs are one exact key prefix (the
// name's length comes first).
func (jn *Core) List(opts ListOptions) (Page, error) {
	if opts.Limit <= 0 {
		opts.Limit = 100
	}
	if opts.MaxScan <= 0 {
		opts.MaxScan = 100_000
	}
	states := []State{Waiting, Pending, Dead}
	switch opts.State {
	case 0:
	case Waiting, Pending, Dead, Done, Cancelled:
		states = []State{opts.State}
	default:
		return Page{}, fmt.Errorf("%w: unknown job state %s", ErrBadFilter, opts.State)
	}
	var after []byte
	if opts.After != "" {
		s, key, err := parseCursor(opts.After)
		if err != nil {
			return Page{}, err
		}
		for len(states) > 0 && states[0] != s {
			states = states[1:]
		}
		if len(states) == 0 {
			return Page{}, fmt.Errorf("%w: cursor %q does not fit state %s", ErrBadFilter, opts.After, opts.State)
		}
		after = key
	}
	var prefix []byte
	if opts.Queue != "" {
		prefix = queuePrefix(opts.Queue)
	}
	var page Page
	scanned := 0
	var k0 []byte // the last key looked at,
	var k0s State // in this state's index
	err := jn.view(func(t Tx) error {
		for i, s := range states {
			from, skip := prefix, []byte(nil)
			if i == 0 && after != nil {
				from, skip = after, after
			}
			var keys, ids [][]byte
			stop := false
			// take looks at the index entries gathered, with their
			// records read at once; stop when the page is full.
			take := func() error {
				recs := t.Gets(BucketJobs, ids)
				for n, k := range keys {
					id := ids[n]
					if len(page.Jobs) == opts.Limit { // there is more: this page ends here
						page.Next, stop = cursor(page.Jobs[len(page.Jobs)-1]), true
						return nil
					}
					if scanned == opts.MaxScan { // looked at enough: go on from the last one
						page.Next, stop = k0s.String()+":"+hex.EncodeToString(k0), true
						return nil
					}
					scanned++
					k0, k0s = append(k0[:0], k...), s
					if !bytes.HasPrefix(id, []byte(opts.MsgIDPrefix)) {
						continue
					}
					var j *Job
					var err error
					if opts.filtered() || opts.NoPayloads {
						if j, err = jn.indexed(t, index(s), recs[n], k, id, false); err != nil {
							return err
						}
						if j == nil || !opts.Matches(j) {
							continue
						}
					}
					if !opts.NoPayloads { // decoded again, with its payload: matches only
						if j, err = jn.indexed(t, index(s), recs[n], k, id, true); err != nil {
							return err
						}
						if j == nil {
							continue
						}
					}
					page.Jobs = append(page.Jobs, j)
				}
				keys, ids = keys[:0], ids[:0]
				return t.Err()
			}
			err := t.Scan(index(s), from, func(k, id []byte) (bool, error) {
				switch {
				case skip != nil && bytes.Equal(k, skip):
					return true, nil
				case prefix != nil && !bytes.HasPrefix(k, prefix):
					return false, nil
				}
				if _, ok := splitQueueKey(k); !ok {
					return true, nil // a malformed key is left alone
				}
				keys, ids = append(keys, bytes.Clone(k)), append(ids, bytes.Clone(id))
				if len(keys) < listChunk {
					return true, nil
				}
				err := take()
				return !stop, err
			})
			if err == nil && !stop {
				err = take()
			}
			if err != nil || stop {
				return err
			}
		}
		return t.Err()
	})
	return page, err
}

// listChunk is how many index entries List gathers before it reads
// their jobs, in one read: a bound on the records held at once.
const listChunk = 32

// cursor points after the last job shown, in its own state's index.
func cursor(last *Job) string {
	return last.State.String() + ":" + hex.EncodeToString(queueKey(last.Queue, last.Seq))
}

func parseCursor(c string) (State, []byte, error) {
	name, h, ok := strings.Cut(c, ":")
	s, err := ParseState(name)
	key, herr := hex.DecodeString(h)
	if !ok || err != nil || herr != nil {
		return 0, nil, fmt.Errorf("%w: cursor %q is not one a listing gave", ErrBadFilter, c)
	}
	return s, key, nil
}

// Counts implements Journal. It reads the index keys only.
func (jn *Core) Counts(only ...State) ([]Count, error) {
	if len(only) == 0 {
		only = []State{Waiting, Pending, Dead, Done, Cancelled}
	}
	var out []Count
	at := map[string]int{}
	err := jn.view(func(t Tx) error {
		for _, s := range only {
			err := t.Scan(index(s), nil, func(k, _ []byte) (bool, error) {
				q, ok := splitQueueKey(k)
				if !ok {
					return true, nil
				}
				i, seen := at[q]
				if !seen {
					i = len(out)
					at[q] = i
					out = append(out, Count{Queue: q})
				}
				switch s {
				case Waiting:
					out[i].Waiting++
				case Pending:
					out[i].Pending++
				case Dead:
					out[i].Dead++
				case Done:
					out[i].Done++
				case Cancelled:
					out[i].Cancelled++
				}
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}
