package store

import (
	"bytes"
	"fmt"
	"time"
)

// Damage: a backend that checks its bytes (boltstore: a CRC-32C on every
// value) gives a value that fails its check as missing, and lists it in
// the transaction's Damaged. The core then moves it aside, once, with a
// write of its own, and tells OnDamage:
//
//   - a job record that still decodes becomes a dead letter, whatever
//     its state, with the reason "damaged in the journal: ..." and a
//     trail event saying so: it is never dispatched as good, and an
//     operator may still look at it (or, knowing, retry it);
//   - anything else (a record that does not decode, an index entry, a
//     result, a schedule, a queue's controls) goes to the damaged bucket
//     under its bucket and key, with the reason, and leaves its place:
//     Damaged lists them.
//
// An index entry that names a job not stored is moved aside the same
// way. Everything else keeps being served.

// ErrDamaged is a stored value that fails its checksum (errors.Is
// matches ErrCorrupt too).
var ErrDamaged error = kindOf{"a stored value fails its checksum", ErrCorrupt}

// Damage is a stored value that failed its check.
type Damage struct {
	Bucket, Key []byte
	Reason      string
}

func (d Damage) String() string { return fmt.Sprintf("%s/%q: %s", d.Bucket, d.Key, d.Reason) }

// DamagedEntry is a value moved to the damaged bucket.
type DamagedEntry struct {
	Bucket, Key string
	Reason      string
	Found       time.Time
	Value       []byte // what was stored, unchecked
}

// EventDamaged is the trail event of a job moved to the dead letters for
// its damaged record.
const EventDamaged = "damaged"

// noteDamage queues the move aside of what a transaction found damaged,
// once a key.
func (jn *Core) noteDamage(ds []Damage) {
	for _, d := range ds {
		key := string(d.Bucket) + "/" + string(d.Key)
		jn.qmu.Lock()
		queued := jn.quarantining[key]
		jn.quarantining[key] = true
		jn.qmu.Unlock()
		if queued {
			continue
		}
		if jn.opts.OnDamage != nil {
			jn.opts.OnDamage(d)
		}
		jn.enqueue(write{
			apply:  func(t Tx) error { return quarantine(t, d, time.Now()) },
			reads:  []Key{{Bucket: d.Bucket, Key: d.Key}},
			finish: func(error) { jn.qmu.Lock(); delete(jn.quarantining, key); jn.qmu.Unlock() },
		})
	}
}

// quarantine moves a damaged value aside (see above). A value that no
// longer fails (replaced since) is left alone.
func quarantine(t Tx, d Damage, now time.Time) error {
	raw := t.Raw(d.Bucket, d.Key)
	if raw == nil {
		return nil // gone meanwhile
	}
	if v := t.Get(d.Bucket, d.Key); v != nil && (!isIndex(d.Bucket) || t.Get(BucketJobs, v) != nil) {
		return nil // whole (again), and if an index entry, its job is stored
	}
	reason := "damaged in the journal: " + d.Reason
	if bytes.Equal(d.Bucket, BucketJobs) {
		j, err := decodeJob(d.Key, raw, true)
		if e, ok := t.(*encTx); ok && encrypted(raw) {
			// What decrypts is kept; the value as it was, beside it.
			if j, err = e.keys.salvageJob(d.Key, raw); err == nil {
				if err := t.Put(BucketDamaged, damagedKey(d.Bucket, d.Key), encodeDamaged(reason, now, raw)); err != nil {
					return err
				}
			}
		}
		if err == nil && j.Queue != "" && len(j.Queue) <= MaxQueueLen {
			if err := t.Delete(index(j.State), queueKey(j.Queue, j.Seq)); err != nil {
				return err
			}
			j.State, j.LastError, j.NotBefore, j.Finished = Dead, reason, time.Time{}, time.Time{}
			j.Trail = withTrail(j.Trail, []TrailEvent{{Time: now, Kind: EventDamaged, Reason: reason}})
			if err := t.Put(BucketJobs, d.Key, j.encode()); err != nil {
				return err
			}
			return t.Put(BucketDead, queueKey(j.Queue, j.Seq), d.Key)
		}
	}
	if err := t.Put(BucketDamaged, damagedKey(d.Bucket, d.Key), encodeDamaged(reason, now, raw)); err != nil {
		return err
	}
	return t.Delete(d.Bucket, d.Key)
}

// isIndex reports an index bucket (queue key -> msgid).
func isIndex(bucket []byte) bool {
	return bytes.Equal(bucket, BucketPending) || bytes.Equal(bucket, BucketDead) || bytes.Equal(bucket, BucketDone) || bytes.Equal(bucket, BucketCancelled)
}

func damagedKey(bucket, key []byte) []byte {
	return append(append(append([]byte(nil), bucket...), '/'), key...)
}

// encodeDamaged: the time found (unix ns, 8 bytes), the reason with its
// length, the value.
func encodeDamaged(reason string, now time.Time, raw []byte) []byte {
	b := ExpiryBytes(now.UnixNano())
	b = append(b, byte(len(reason)>>8), byte(len(reason)))
	b = append(b, reason[:min(len(reason), 65535)]...)
	return append(b, raw...)
}

// DecodeDamaged reads an entry of the damaged bucket.
func DecodeDamaged(k, v []byte) (DamagedEntry, bool) {
	i := bytes.IndexByte(k, '/')
	if i < 0 || len(v) < 10 {
		return DamagedEntry{}, false
	}
	n := int(v[8])<<8 | int(v[9])
	if len(v) < 10+n {
		return DamagedEntry{}, false
	}
	return DamagedEntry{Bucket: string(k[:i]), Key: string(k[i+1:]), Reason: string(v[10 : 10+n]),
		Found: time.Unix(0, int64(beUint64(v[:8]))), Value: bytes.Clone(v[10+n:])}, true
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}

// Damaged lists what was moved to the damaged bucket, oldest key first.
func (jn *Core) Damaged() ([]DamagedEntry, error) {
	var out []DamagedEntry
	err := jn.view(func(t Tx) error {
		return t.Scan(BucketDamaged, nil, func(k, v []byte) (bool, error) {
			if e, ok := DecodeDamaged(k, v); ok {
				out = append(out, e)
			}
			return true, nil
		})
	})
	return out, err
}

// Quarantined is a journal that moves damaged values aside and lists
// them (every backend of this package's Core).
type Quarantined interface {
	Damaged() ([]DamagedEntry, error)
}
