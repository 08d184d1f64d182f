package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// encTx is a backend's transaction seen through the journal's keys
// (encrypt.go): what the logic puts is encrypted before the backend has
// it, and what it reads is decrypted, a value that fails its tag given
// as missing and listed in Damaged. Values in clear (a journal that was
// not encrypted before) are read as they are.
type encTx struct {
	Tx
	keys    *Keyring
	damaged []Damage
}

var (
	_ HeadReader = (*encTx)(nil)
	_ Peeker     = (*encTx)(nil)
	_ Prefetcher = (*encTx)(nil)
)

// wrap is t through the journal's keys, if it has any.
func (j *Core) wrap(t Tx) Tx {
	k := j.keys.Load()
	if k == nil {
		return t
	}
	return &encTx{Tx: t, keys: k}
}

// rawTx is the backend's own transaction under t: the values as stored
// (a backup's, a restore's).
func rawTx(t Tx) Tx {
	if e, ok := t.(*encTx); ok {
		return e.Tx
	}
	return t
}

// decrypt is stored value v of bucket's key in clear, nil (noted as
// damaged) when it does not decrypt.
func (t *encTx) decrypt(bucket, key, v []byte, whole bool) []byte {
	if !valueEncrypted(bucket, v) {
		return v
	}
	c, err := t.keys.decryptValue(bucket, key, v, whole)
	if err != nil {
		t.damaged = append(t.damaged, Damage{Bucket: bytes.Clone(bucket), Key: bytes.Clone(key), Reason: err.Error()})
		return nil
	}
	if whole && len(v) >= releaseSize {
		t.Tx.Release(v) // read again only through the copy in clear
	}
	return c
}

// releaseSize: a stored value this large is given back to the backend
// once decrypted.
const releaseSize = 64 << 10

func (t *encTx) Get(bucket, key []byte) []byte {
	return t.decrypt(bucket, key, t.Tx.Get(bucket, key), true)
}

func (t *encTx) Gets(bucket []byte, keys [][]byte) [][]byte {
	vals := t.Tx.Gets(bucket, keys)
	if encryptedBucket(bucket) {
		for i, v := range vals {
			vals[i] = t.decrypt(bucket, keys[i], v, true)
		}
	}
	return vals
}

func (t *encTx) Scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	if !encryptedBucket(bucket) {
		return t.Tx.Scan(bucket, from, fn)
	}
	return t.Tx.Scan(bucket, from, func(k, v []byte) (bool, error) {
		if v = t.decrypt(bucket, k, v, true); v == nil {
			return true, nil // damaged: as missing
		}
		return fn(k, v)
	})
}

func (t *encTx) Put(bucket, key, val []byte) error {
	if len(t.keys.keys) == 1 {
		// One key: what is sealed is under it (SetKeys keeps every key
		// the journal names).
	} else if name, ok := sealedWith(bucket, key, val); ok && name != t.keys.keys[0].name {
		// Sealed before the keys changed (an Append seals before it is
		// queued): sealed again under the first key. A rekey's last pass
		// would find it too, but it may have ended.
		c, err := t.keys.decryptValue(bucket, key, val, true)
		if err != nil {
			return err
		}
		val = c
	}
	ev, err := t.keys.encryptValue(bucket, key, val)
	if err != nil {
		return err
	}
	return t.Tx.Put(bucket, key, ev)
}

// Head implements HeadReader: a job's head decrypted (its payload not
// read), a kept result's expiry.
func (t *encTx) Head(bucket, key []byte) []byte {
	h := headOf(t.Tx, bucket, key)
	if bytes.Equal(bucket, BucketResults) && len(h) == 8 && h[0]&resultFlag != 0 {
		return append([]byte{h[0] &^ resultFlag}, h[1:]...)
	}
	return t.decrypt(bucket, key, h, false)
}

// Peek implements Peeker: a job's head decrypted, its payload neither
// read nor decrypted (Load).
func (t *encTx) Peek(bucket, key []byte) ([]byte, bool) {
	p, ok := t.Tx.(Peeker)
	if !ok {
		return t.Get(bucket, key), true
	}
	v, checked := p.Peek(bucket, key)
	return t.decrypt(bucket, key, v, false), checked
}

func (t *encTx) Prefetch(keys []Key) {
	if p, ok := t.Tx.(Prefetcher); ok {
		p.Prefetch(keys)
	}
}

func (t *encTx) Release(v []byte) { t.Tx.Release(v) }

func (t *encTx) Damaged() []Damage { return slices.Concat(t.Tx.Damaged(), t.damaged) }

// KeysKey is meta's key of the names of the keys the journal was ever
// encrypted with, each with a check value (a known text encrypted under
// it): a journal opened with a key of that name but other bytes is
// refused.
var KeysKey = []byte("keys")

type keysRecord struct {
	Keys []keyRecord `json:"keys"`
}

type keyRecord struct {
	Name  string `json:"name"`
	Check []byte `json:"check"`
}

var keyCheckText = []byte("emq journal key")

func (r keysRecord) names() []string {
	out := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = k.Name
	}
	return out
}

func readKeysRecord(t Tx) (keysRecord, error) {
	var r keysRecord
	v := rawTx(t).Get(BucketMeta, KeysKey)
	if v == nil {
		return r, t.Err()
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("%w: its meta/keys does not read: %v", ErrCorrupt, err)
	}
	return r, nil
}

// EncryptedWith names the keys the journal was ever encrypted with
// (none: it never was).
func (j *Core) EncryptedWith() ([]string, error) {
	var r keysRecord
	err := j.kv.View(func(t Tx) (err error) { r, err = readKeysRecord(t); return err })
	return r.names(), err
}

// KeysRecordNames reads a meta/keys value (a backend's tools).
func KeysRecordNames(v []byte) ([]string, error) {
	var r keysRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("%w: meta/keys does not read: %v", ErrCorrupt, err)
	}
	return r.names(), nil
}

// CheckKeys checks the keys a journal named name (in errors) on kv is
// opened with, and fails with ErrKeys naming the key and the file: every
// key the journal names must be given, with the bytes it was encrypted
// with. A journal never encrypted opens without keys. A backend calls it
// as it opens, before its core starts.
func CheckKeys(kv KV, name string, keys *Keyring) error {
	var r keysRecord
	if err := kv.View(func(t Tx) (err error) { r, err = readKeysRecord(t); return err }); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	return keys.check(r, "journal "+name)
}

// CheckKeysValue is CheckKeys of the journal's meta/keys value v (nil:
// none).
func CheckKeysValue(v []byte, name string, keys *Keyring) error {
	var r keysRecord
	if v != nil {
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("%w: journal %s: its meta/keys does not read: %v", ErrCorrupt, name, err)
		}
	}
	return keys.check(r, "journal "+name)
}

// NoteKeys names the journal's encrypting key in meta/keys, if it is not
// named yet, before any value is encrypted with it: no value is ever
// under a key the journal does not name. A backend opened for writing
// with keys calls it before it serves.
func (j *Core) NoteKeys() error {
	k := j.keys.Load()
	if k == nil || j.opts.ReadOnly {
		return nil
	}
	var r keysRecord
	if err := j.kv.View(func(t Tx) (err error) { r, err = readKeysRecord(t); return err }); err != nil || slices.Contains(r.names(), k.keys[0].name) {
		return err // named already: nothing to write
	}
	_, err := Wait(func(done func(struct{}, error)) {
		j.Write(func(t Tx) error {
			r, err := readKeysRecord(t)
			if err != nil || slices.Contains(r.names(), k.keys[0].name) {
				return err
			}
			r.Keys = append(r.Keys, k.record(0))
			v, err := json.Marshal(r)
			if err != nil {
				return err
			}
			return t.Put(BucketMeta, KeysKey, v)
		}, func(err error) { done(struct{}{}, err) })
	})
	if err != nil {
		return fmt.Errorf("journal %s: naming its key %s in meta: %w", j.name, k.keys[0].name, err)
	}
	return nil
}

func (k *Keyring) record(i int) keyRecord {
	rk := &k.keys[i]
	return keyRecord{Name: rk.name, Check: sealWith(rk, nil, partCheck, BucketMeta, []byte(rk.name), keyCheckText)}
}

// check refuses keys that do not open what r names (in what: a journal,
// a backup).
func (k *Keyring) check(r keysRecord, what string) error {
	if len(r.Keys) == 0 {
		return nil
	}
	if k == nil {
		return fmt.Errorf("%w: %s is encrypted at rest with keys %s, and no keys were given (--journal-keys FILE)", ErrKeys, what, strings.Join(r.names(), ", "))
	}
	for _, rec := range r.Keys {
		if k.find(rec.Name) == nil {
			return fmt.Errorf("%w: %s holds values encrypted with key %s, which %s does not hold (a key is needed until emq journal rekey has sealed everything under a newer one)", ErrKeys, what, rec.Name, k.file)
		}
		if blobKey(rec.Check) != rec.Name {
			return fmt.Errorf("%w: %s: the check value of key %s does not read", ErrCorrupt, what, rec.Name)
		}
		if _, err := k.open(partCheck, BucketMeta, []byte(rec.Name), rec.Check); err != nil {
			return fmt.Errorf("%w: key %s in %s is not the key %s was encrypted with (the same name, other bytes)", ErrKeys, rec.Name, k.file, what)
		}
	}
	return nil
}
