package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/eventmq/emq/migrations"
	bolt "go.etcd.io/bbolt"
)

// Load implements Journal. It walks the pending index in one read
// transaction; each job is decoded (copied) only when fn is called, and
// its payload not at all. The file pages it read are then released from
// the process's memory (pages_linux.go).
func (b *Bolt) Load(fn func(*Job) error) error {
	return b.view(func(tx *bolt.Tx) error {
		defer dropMapping(tx)
		jobs := tx.Bucket(migrations.Jobs)
		c := index(tx, Pending).Cursor()
		for k, id := c.First(); k != nil; k, id = c.Next() {
			j, err := b.indexed(jobs, k, id, false)
			if err != nil {
				return err
			}
			if err := fn(j); err != nil {
				return err
			}
		}
		return nil
	})
}

// indexed returns the job an index entry (k -> id) names.
func (b *Bolt) indexed(jobs *bolt.Bucket, k, id []byte, withPayload bool) (*Job, error) {
	rec := jobs.Get(id)
	if rec == nil {
		return nil, fmt.Errorf("%w: journal %s: index entry %x names job %q, which is missing", ErrCorrupt, b.path, k, id)
	}
	j, err := decodeJob(id, rec, withPayload)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", b.path, err)
	}
	return j, nil
}

// Get implements Journal.
func (b *Bolt) Get(msgid string) (*Job, error) {
	var j *Job
	err := b.view(func(tx *bolt.Tx) error {
		rec := tx.Bucket(migrations.Jobs).Get([]byte(msgid))
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
// copied out of the file's mapping, nothing else of the record is read,
// and the pages a large one lay on are released (pages_linux.go).
func (b *Bolt) Payloads(msgids []string, fn func(i int, payload []byte, err error)) error {
	return b.view(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(migrations.Jobs)
		for i, msgid := range msgids {
			rec := jobs.Get([]byte(msgid))
			if rec == nil {
				fn(i, nil, fmt.Errorf("%w: %s", ErrNotFound, msgid))
				continue
			}
			p, err := payloadOf([]byte(msgid), rec)
			if err != nil {
				err = fmt.Errorf("journal %s: %w", b.path, err)
			}
			c := clone(p)
			dropPages(p)
			fn(i, c, err)
		}
		return nil
	})
}

// Result implements Journal.
func (b *Bolt) Result(msgid string) ([]byte, error) {
	var out []byte
	err := b.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(migrations.Results).Get([]byte(msgid))
		if v != nil && len(v) < 8 {
			return fmt.Errorf("%w: journal %s: result of %s is %d bytes, too short for its expiry", ErrCorrupt, b.path, msgid, len(v))
		}
		if v == nil || int64(binary.BigEndian.Uint64(v[:8])) < time.Now().UnixNano() {
			return fmt.Errorf("%w: no result kept for %s", ErrNotFound, msgid)
		}
		out = bytes.Clone(v[8:])
		return nil
	})
	return out, err
}

// List implements Journal. The cursor names the last job shown, by its
// state's index and key; a queue's jobs are one exact key prefix (the
// name's length comes first).
func (b *Bolt) List(opts ListOptions) (Page, error) {
	if opts.Limit <= 0 {
		opts.Limit = 100
	}
	if opts.MaxScan <= 0 {
		opts.MaxScan = 100_000
	}
	states := []State{Pending, Dead}
	switch opts.State {
	case 0:
	case Pending, Dead, Done:
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
	err := b.view(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(migrations.Jobs)
		for i, s := range states {
			idx := index(tx, s)
			if idx == nil { // done, in a file from before step 5 open read-only
				continue
			}
			c := idx.Cursor()
			var k, id []byte
			switch {
			case i == 0 && after != nil:
				if k, id = c.Seek(after); bytes.Equal(k, after) {
					k, id = c.Next()
				}
			case prefix != nil:
				k, id = c.Seek(prefix)
			default:
				k, id = c.First()
			}
			for ; k != nil; k, id = c.Next() {
				if prefix != nil && !bytes.HasPrefix(k, prefix) {
					break
				}
				if _, ok := splitQueueKey(k); !ok {
					continue // a malformed key is left alone
				}
				if len(page.Jobs) == opts.Limit { // there is more: this page ends here
					page.Next = cursor(page.Jobs[len(page.Jobs)-1])
					return nil
				}
				if scanned == opts.MaxScan { // looked at enough: go on from the last one
					page.Next = k0s.String() + ":" + hex.EncodeToString(k0)
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
					if j, err = b.indexed(jobs, k, id, false); err != nil {
						return err
					}
					if !opts.Matches(j) {
						continue
					}
				}
				if !opts.NoPayloads { // decoded again, with its payload: matches only
					if j, err = b.indexed(jobs, k, id, true); err != nil {
						return err
					}
				}
				page.Jobs = append(page.Jobs, j)
			}
		}
		return nil
	})
	return page, err
}

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
func (b *Bolt) Counts(only ...State) ([]Count, error) {
	if len(only) == 0 {
		only = []State{Pending, Dead, Done}
	}
	var out []Count
	at := map[string]int{}
	err := b.view(func(tx *bolt.Tx) error {
		for _, s := range only {
			idx := index(tx, s)
			if idx == nil { // done, in a file from before step 5 open read-only
				continue
			}
			c := idx.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				q, ok := splitQueueKey(k)
				if !ok {
					continue
				}
				i, seen := at[q]
				if !seen {
					i = len(out)
					at[q] = i
					out = append(out, Count{Queue: q})
				}
				switch s {
				case Pending:
					out[i].Pending++
				case Dead:
					out[i].Dead++
				case Done:
					out[i].Done++
				}
			}
		}
		return nil
	})
	return out, err
}
