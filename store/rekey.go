package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Keys rotated online. A new first key (SetKeys: SIGHUP, or a restart)
// seals every value written from then on; Rekey seals again, under it,
// what is stored under older keys (or in clear), in the background:
//
//   - The rekey is a record in the journal (meta/rekey): the key it seals
//     under, where it is (a bucket and the last key passed), its counts.
//     Each step writes it in the transaction of the values it sealed, so
//     whoever opens the journal next for writing (a restart, the next
//     leader on etcd) goes on from there (ResumeRekey).
//   - A step reads up to rekeyScan values of a bucket in a read
//     transaction, picks those not under the key, and seals them again in
//     one write of the committer, in turn with the broker's writes: each
//     is read, decrypted and sealed inside that write, so nothing written
//     since the read is lost. Steps are paced to the rate asked.
//   - When every bucket is passed, one more pass counts what is still not
//     under the key (a value sealed before the keys changed, written
//     behind the cursor); while any is, the passes go on. The last write
//     drops the rekey record and, from meta/keys, every key but the one
//     it sealed under: from then on the journal opens without them.
//   - A new first key during a rekey starts it again, under that key.
//
// A key meta/keys names is still needed: SetKeys, and the open, refuse
// keys without it, naming it.

// RekeyKey is meta's key of a rekey under way.
var RekeyKey = []byte("rekey")

// DefaultRekeyRate is how many values a second a rekey seals again when
// it is not told.
const DefaultRekeyRate = 20000

const (
	rekeyScan  = 4096    // values one step reads at most
	rekeyBatch = 256     // values one step seals again at most
	rekeyBytes = 4 << 20 // stored bytes one step seals again at most
)

var rekeyBuckets = [][]byte{BucketJobs, BucketResults, BucketSchedules}

// RekeyStatus is a rekey's progress (emq stats, the dashboard).
type RekeyStatus struct {
	// Key is the key it seals under; empty when no rekey ever ran here.
	Key     string `json:"key,omitempty"`
	Running bool   `json:"running"`
	// Bucket is where it is: jobs, results or schedules.
	Bucket string `json:"bucket,omitempty"`
	// Pass counts the passes over the buckets: the first seals, the
	// next ones find what was written behind it (usually nothing).
	Pass int `json:"pass,omitempty"`
	// Scanned of Total values looked at in this pass; Resealed of them
	// sealed again (in all passes). Left is what the count at the start
	// found not under the key, less what was sealed since.
	Scanned  int64 `json:"scanned"`
	Total    int64 `json:"total"`
	Resealed int64 `json:"resealed"`
	Left     int64 `json:"left"`
	// Rate is the values a second it is paced to.
	Rate     int       `json:"rate"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Dropped are the keys the journal no longer names, at the end: the
	// key file may go without them.
	Dropped []string `json:"dropped,omitempty"`
	// Error is the last step's failure (it is tried again).
	Error string `json:"error,omitempty"`
}

// rekeyRecord is meta/rekey.
type rekeyRecord struct {
	Key      string    `json:"key"`
	Bucket   int       `json:"bucket"` // in rekeyBuckets
	After    []byte    `json:"after,omitempty"`
	Pass     int       `json:"pass"`
	Scanned  int64     `json:"scanned"`
	Total    int64     `json:"total"`
	Resealed int64     `json:"resealed"`
	Left     int64     `json:"left"`
	Rate     int       `json:"rate"`
	Started  time.Time `json:"started"`
}

// rekeyState is the rekey's part of Core.
type rekeyState struct {
	mu      sync.Mutex
	running bool
	status  RekeyStatus
	asked   atomic.Int64  // a new rate for the running rekey (0: none)
	wake    chan struct{} // cap 1: a new rate was asked
}

// Keys are the journal's keys now (nil: none).
func (j *Core) Keys() *Keyring { return j.keys.Load() }

// SetKeys makes k the journal's keys: its first key seals every value
// written from now on. It refuses, naming the key, keys without one the
// journal names (a key still needed: a rekey drops it once nothing is
// sealed under it) or holding other bytes under its name, and no keys
// at all for a journal that was ever encrypted.
func (j *Core) SetKeys(k *Keyring) error {
	if k == nil {
		if names, err := j.EncryptedWith(); err != nil || len(names) == 0 {
			return err
		}
		return fmt.Errorf("%w: journal %s is encrypted at rest: it cannot go on without keys", ErrKeys, j.name)
	}
	var r keysRecord
	if err := j.kv.View(func(t Tx) (err error) { r, err = readKeysRecord(t); return err }); err != nil {
		return err
	}
	if err := k.check(r, "journal "+j.name); err != nil {
		return err
	}
	j.keys.Store(k)
	return j.NoteKeys()
}

// ErrNoKeys is a rekey of a journal opened without keys.
var ErrNoKeys = errors.New("the journal has no keys to seal under (--journal-keys FILE)")

// Rekey starts sealing again under the first key what is stored under
// older keys or in clear, paced to rate values a second (0: the rate of
// the rekey under way, or DefaultRekeyRate); a rekey under way goes on
// at the new rate. It returns at once; RekeyStatus tells the progress.
func (j *Core) Rekey(rate int) (RekeyStatus, error) {
	k := j.keys.Load()
	switch {
	case j.opts.ReadOnly:
		return RekeyStatus{}, fmt.Errorf("%w: %s", ErrReadOnly, j.name)
	case k == nil:
		return RekeyStatus{}, fmt.Errorf("journal %s: %w", j.name, ErrNoKeys)
	case rate < 0:
		return RekeyStatus{}, fmt.Errorf("rekey: a rate of %d values a second", rate)
	}
	j.rekey.mu.Lock()
	if j.rekey.running {
		j.rekey.mu.Unlock()
		if rate > 0 {
			j.rekey.asked.Store(int64(rate))
			select {
			case j.rekey.wake <- struct{}{}:
			default: // woken already: it reads the latest
			}
		}
		return j.RekeyStatus(), nil
	}
	j.rekey.mu.Unlock()
	r, err := j.readRekey()
	if err != nil {
		return RekeyStatus{}, err
	}
	if r == nil || r.Key != k.keys[0].name {
		r = &rekeyRecord{Key: k.keys[0].name, Started: time.Now(), Pass: 1}
	}
	if rate > 0 || r.Rate == 0 {
		r.Rate = cmpOr(rate, DefaultRekeyRate)
	}
	if err := j.writeRekey(r); err != nil {
		return RekeyStatus{}, err
	}
	j.startRekey(r)
	return j.RekeyStatus(), nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// ResumeRekey goes on with a rekey the journal holds (meta/rekey): a
// backend opened for writing calls it after NoteKeys.
func (j *Core) ResumeRekey() error {
	if j.opts.ReadOnly || j.keys.Load() == nil {
		return nil
	}
	r, err := j.readRekey()
	if err != nil || r == nil {
		return err
	}
	j.startRekey(r)
	return nil
}

// RekeyStatus is the rekey's progress: the one under way, or the last
// one this journal ran since it opened (or the one it holds, not yet
// resumed).
func (j *Core) RekeyStatus() RekeyStatus {
	j.rekey.mu.Lock()
	defer j.rekey.mu.Unlock()
	s := j.rekey.status
	s.Dropped = slices.Clone(s.Dropped)
	return s
}

func (j *Core) setRekeyStatus(r *rekeyRecord, running bool, err error) {
	j.rekey.mu.Lock()
	defer j.rekey.mu.Unlock()
	j.rekey.status = rekeyStatus(r, running, err)
}

// rekeyStatus is r's progress as RekeyStatus tells it.
func rekeyStatus(r *rekeyRecord, running bool, err error) RekeyStatus {
	s := RekeyStatus{Key: r.Key, Running: running, Pass: r.Pass, Scanned: r.Scanned, Total: r.Total,
		Resealed: r.Resealed, Left: max(r.Left, 0), Rate: r.Rate, Started: r.Started}
	if r.Bucket < len(rekeyBuckets) {
		s.Bucket = string(rekeyBuckets[r.Bucket])
	}
	if err != nil {
		s.Error = err.Error()
	}
	return s
}

func (j *Core) startRekey(r *rekeyRecord) {
	j.rekey.mu.Lock()
	defer j.rekey.mu.Unlock()
	if j.rekey.running {
		return
	}
	j.rekey.running = true
	if j.rekey.wake == nil {
		j.rekey.wake = make(chan struct{}, 1)
	}
	j.rekey.asked.Store(0) // meant for one that ended meanwhile
	j.rekey.status = rekeyStatus(r, true, nil)
	go j.runRekey(r)
}

func (j *Core) readRekey() (*rekeyRecord, error) {
	var v []byte
	err := j.kv.View(func(t Tx) error {
		v = bytes.Clone(t.Get(BucketMeta, RekeyKey))
		return t.Err()
	})
	if err != nil || v == nil {
		return nil, err
	}
	r := new(rekeyRecord)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, fmt.Errorf("%w: journal %s: its meta/rekey does not read: %v", ErrCorrupt, j.name, err)
	}
	return r, nil
}

func (j *Core) writeRekey(r *rekeyRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = Wait(func(done func(struct{}, error)) {
		j.Write(func(t Tx) error { return t.Put(BucketMeta, RekeyKey, v) }, func(err error) { done(struct{}{}, err) })
	})
	return err
}

// runRekey is the rekey's goroutine: it runs until every value is under
// r.Key, or the journal stops.
func (j *Core) runRekey(r *rekeyRecord) {
	var failed error
	defer func() {
		j.rekey.mu.Lock()
		j.rekey.running = false
		j.rekey.status.Running = false
		j.rekey.mu.Unlock()
	}()
	counted := r.Total > 0
	for {
		select {
		case <-j.stopping:
			return
		default:
		}
		if rate := j.rekey.asked.Swap(0); rate > 0 {
			r.Rate = int(rate)
		}
		if k := j.keys.Load(); k != nil && k.keys[0].name != r.Key {
			// A new first key: everything again, under it.
			*r = rekeyRecord{Key: k.keys[0].name, Pass: 1, Rate: r.Rate, Started: time.Now()}
			counted = false
		}
		start := time.Now()
		var n int
		var err error
		switch {
		case !counted:
			err = j.countRekey(r)
			counted = err == nil
		case r.Bucket < len(rekeyBuckets):
			n, err = j.rekeyStep(r)
		default:
			var finished bool
			if finished, err = j.finishRekey(r); finished {
				return
			}
		}
		if err != nil {
			if failed == nil || err.Error() != failed.Error() {
				failed = err
			}
			j.setRekeyStatus(r, true, err)
			if !j.rekeyPause(time.Second) {
				return
			}
			continue
		}
		failed = nil
		j.setRekeyStatus(r, true, nil)
		if n > 0 && !j.rekeyPause(time.Duration(float64(n)/float64(r.Rate)*float64(time.Second))-time.Since(start)) {
			return
		}
	}
}

// rekeyPause waits d, or until a new rate is asked (the loop takes it),
// or the journal stops (false).
func (j *Core) rekeyPause(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-j.rekey.wake:
	case <-j.stopping:
		return false
	}
	return true
}

// needsSeal reports a stored value not sealed under key: in clear (with
// a secret in it), or under another key.
func needsSeal(bucket, k, v []byte, key string) bool {
	if name, ok := sealedWith(bucket, k, v); ok {
		return name != key
	}
	switch {
	case len(v) == 0:
		return false
	case bytes.Equal(bucket, BucketResults):
		return len(v) > 8
	}
	return true
}

// countRekey counts the values of a pass, and those not under the key,
// and starts the pass at its first bucket. It reads rekeyScan values a
// read transaction: a long one would hold bbolt's file from growing.
func (j *Core) countRekey(r *rekeyRecord) error {
	var total, left int64
	for _, b := range rekeyBuckets {
		var from []byte
		for more := true; more; {
			more = false
			n := 0
			err := j.kv.View(func(t Tx) error {
				err := t.Scan(b, from, func(k, v []byte) (bool, error) {
					if n == rekeyScan {
						from, more = bytes.Clone(k), true // the next read starts at it
						return false, nil
					}
					n++
					total++
					if needsSeal(b, k, v, r.Key) {
						left++
					}
					return true, nil
				})
				if err != nil {
					return err
				}
				return t.Err()
			})
			if err != nil {
				return err
			}
			select {
			case <-j.stopping:
				return ErrClosed
			default:
			}
		}
	}
	r.Total, r.Left, r.Scanned, r.Bucket, r.After = total, left, 0, 0, nil
	return nil
}

// rekeyStep seals again the next values of the pass not under the key,
// and notes where it is, in one write.
func (j *Core) rekeyStep(r *rekeyRecord) (int, error) {
	bucket := rekeyBuckets[r.Bucket]
	var keys [][]byte
	var scanned int64
	var last []byte
	end := true
	err := j.kv.View(func(t Tx) error {
		from := r.After
		if from != nil {
			from = append(bytes.Clone(from), 0)
		}
		size, most, bytesMost := 0, rekeyBatch, rekeyBytes
		if j.opts.MaxWriteKeys > 0 {
			most = min(most, j.opts.MaxWriteKeys-1) // and meta/rekey
		}
		if j.opts.MaxWrite > 0 {
			bytesMost = min(bytesMost, j.opts.MaxWrite/2) // sealed again, a value grows
		}
		err := t.Scan(bucket, from, func(k, v []byte) (bool, error) {
			if scanned == rekeyScan || len(keys) == most || size+len(v) > bytesMost && len(keys) > 0 {
				end = false
				return false, nil
			}
			scanned++
			last = bytes.Clone(k)
			if needsSeal(bucket, k, v, r.Key) {
				keys = append(keys, last)
				size += len(v)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		return t.Err()
	})
	if err != nil {
		return 0, err
	}
	next := *r
	next.Scanned += scanned
	if end {
		next.Bucket, next.After = r.Bucket+1, nil
	} else {
		next.After = last
	}
	key := r.Key
	sealed := 0
	_, err = Wait(func(done func(struct{}, error)) {
		j.Write(func(t Tx) error {
			sealed = 0
			raw := rawTx(t)
			for _, k := range keys {
				if v := raw.Get(bucket, k); v == nil || !needsSeal(bucket, k, v, key) {
					continue // changed since: sealed as it was written
				}
				c := t.Get(bucket, k) // nil when damaged: moved aside
				if c == nil {
					continue
				}
				if err := t.Put(bucket, k, c); err != nil {
					return err
				}
				sealed++
			}
			next.Resealed, next.Left = r.Resealed+int64(sealed), r.Left-int64(sealed)
			v, err := json.Marshal(&next)
			if err != nil {
				return err
			}
			return t.Put(BucketMeta, RekeyKey, v)
		}, func(err error) { done(struct{}{}, err) })
	})
	if err != nil {
		return 0, err
	}
	*r = next
	return max(sealed, len(keys)), nil
}

// finishRekey ends a pass: when nothing is left outside the key, it
// drops the rekey and every other key from meta (finished); else it
// starts another pass.
func (j *Core) finishRekey(r *rekeyRecord) (finished bool, err error) {
	if err := j.countRekey(r); err != nil {
		return false, err
	}
	if r.Left > 0 {
		r.Pass++
		return false, nil
	}
	var dropped []string
	_, err = Wait(func(done func(struct{}, error)) {
		j.Write(func(t Tx) error {
			if k := j.keys.Load(); k == nil || k.keys[0].name != r.Key {
				return nil // the keys changed: the loop starts again
			}
			kr, err := readKeysRecord(t)
			if err != nil {
				return err
			}
			keep := kr.Keys[:0:0]
			dropped = dropped[:0]
			for _, rec := range kr.Keys {
				if rec.Name == r.Key {
					keep = append(keep, rec)
				} else {
					dropped = append(dropped, rec.Name)
				}
			}
			kr.Keys = keep
			v, err := json.Marshal(kr)
			if err != nil {
				return err
			}
			if err := t.Put(BucketMeta, KeysKey, v); err != nil {
				return err
			}
			finished = true
			return t.Delete(BucketMeta, RekeyKey)
		}, func(err error) { done(struct{}{}, err) })
	})
	if err != nil || !finished {
		return false, err
	}
	j.setRekeyStatus(r, true, nil)
	j.rekey.mu.Lock() // ended, at once: no reader sees it stopped first
	j.rekey.running = false
	j.rekey.status.Running, j.rekey.status.Finished, j.rekey.status.Dropped, j.rekey.status.Bucket = false, time.Now(), dropped, ""
	j.rekey.mu.Unlock()
	return true, nil
}

// KeyCounts counts the values stored with secrets in them (jobs,
// results, schedules) by the key sealing them, "" for those in clear.
// With verify each is opened too, and those that do not (a tag that
// fails, a key not held) are listed, not counted.
func (j *Core) KeyCounts(verify bool) (map[string]int64, []Damage, error) {
	counts := map[string]int64{}
	var failed []Damage
	k := j.keys.Load()
	err := j.kv.View(func(t Tx) error {
		for _, b := range rekeyBuckets {
			err := t.Scan(b, nil, func(key, v []byte) (bool, error) {
				name, ok := sealedWith(b, key, v)
				switch {
				case !ok && !needsSeal(b, key, v, ""):
					return true, nil // no secret in it
				case ok && verify && k == nil:
					failed = append(failed, Damage{Bucket: bytes.Clone(b), Key: bytes.Clone(key), Reason: "it is encrypted, and no keys were given"})
					return true, nil
				case ok && verify:
					if _, err := k.decryptValue(b, key, v, true); err != nil {
						failed = append(failed, Damage{Bucket: bytes.Clone(b), Key: bytes.Clone(key), Reason: err.Error()})
						return true, nil
					}
				}
				counts[name]++
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return t.Err()
	})
	return counts, failed, err
}

// String is the progress in a line (emq stats, the CLI).
func (s RekeyStatus) String() string {
	if s.Key == "" {
		return "no rekey"
	}
	var b strings.Builder
	switch {
	case s.Running:
		fmt.Fprintf(&b, "sealing again under key %s: pass %d, %s, %d of %d values looked at, %d sealed again, %d left, at most %d a second",
			s.Key, s.Pass, s.Bucket, s.Scanned, s.Total, s.Resealed, s.Left, s.Rate)
	case !s.Finished.IsZero():
		fmt.Fprintf(&b, "every value is under key %s: %d sealed again in %s", s.Key, s.Resealed, s.Finished.Sub(s.Started).Round(time.Millisecond))
		if len(s.Dropped) > 0 {
			fmt.Fprintf(&b, "; the journal no longer needs key %s", strings.Join(s.Dropped, ", "))
		}
	default:
		fmt.Fprintf(&b, "a rekey under key %s is stopped: %d of %d values looked at, %d sealed again (it goes on when the journal opens for writing)",
			s.Key, s.Scanned, s.Total, s.Resealed)
	}
	if s.Error != "" {
		fmt.Fprintf(&b, "; last error: %s", s.Error)
	}
	return b.String()
}
