package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// Encryption at rest: with a Keyring (CoreOptions.Keys) what users would
// not print is encrypted before it reaches a backend (the log, bbolt,
// etcd, and so backups): payloads, headers, last errors and the trail's
// reasons of jobs, results, and schedules whole. AES-256-GCM, a random
// 96-bit nonce for each value, the key's name in each, and the value's
// bucket and key (and which part it is) as additional data: a value
// moved under another key fails as surely as one whose bytes changed.
// What the indexes need stays in clear: a job's msgid (its key), queue,
// state, sequence, times, attempts, client id, unique key, workflow
// parents and batches, its trail's times, kinds and workers, a result's
// expiry. So do the journal's controls (queues, tenants, limiters,
// batches).
//
// Each encrypted part is a blob: the key name's length (1 byte), the
// name, the nonce, the ciphertext with its 16-byte tag. A job's record
// keeps its layout (job.go) with encFlag in its version byte, and two
// blobs: in its headers field the head part (the payload's size, the
// headers, the last error, the trail's reasons), in its payload field the
// payload (nothing when it is empty); its last error field and its
// trail's reasons are empty. A job's head (head.go) keeps the head part,
// so that Load and the etcd shadow read a job without its payload, and a
// large payload is decrypted only when it is read whole (dispatch). A
// kept result is its expiry with the top bit set, then one blob; a
// schedule is its version byte with encFlag, then one blob of its whole
// record.
//
// The tag joins the checksums: a value that fails it is damage, given as
// missing and moved aside (quarantine.go) like one failing its CRC.

const encFlag = 0x40 // in a job's or a schedule's version byte: encrypted

// The parts of a value, in its additional data.
const (
	partHead     = 'h'
	partPayload  = 'p'
	partResult   = 'r'
	partSchedule = 's'
	partCheck    = 'k'
)

const (
	nonceSize = 12
	tagSize   = 16
)

// blobSize is the size of a blob of n plaintext bytes under k's first
// key.
func (k *Keyring) blobSize(n int) int { return 1 + len(k.keys[0].name) + nonceSize + n + tagSize }

// additional is a part's additional data: its bucket and key.
func additional(part byte, bucket, key []byte) []byte {
	ad := make([]byte, 0, 5+len(bucket)+len(key))
	ad = append(ad, 'e', 'm', 'q', part)
	ad = append(ad, bucket...)
	ad = append(ad, 0)
	return append(ad, key...)
}

// seal appends to dst the blob of plain under the first key.
func (k *Keyring) seal(dst []byte, part byte, bucket, key, plain []byte) []byte {
	return sealWith(&k.keys[0], dst, part, bucket, key, plain)
}

func sealWith(rk *ringKey, dst []byte, part byte, bucket, key, plain []byte) []byte {
	dst = append(dst, byte(len(rk.name)))
	dst = append(dst, rk.name...)
	at := len(dst)
	dst = append(dst, make([]byte, nonceSize)...)
	if _, err := rand.Read(dst[at:]); err != nil {
		panic(fmt.Sprintf("store: no random nonce: %v", err)) // crypto/rand does not fail on Linux
	}
	return rk.aead.Seal(dst, dst[at:at+nonceSize], plain, additional(part, bucket, key))
}

// blobKey is the name of the key a blob was encrypted with ("" when it
// does not read).
func blobKey(blob []byte) string {
	if len(blob) < 1 || len(blob) < 1+int(blob[0]) {
		return ""
	}
	return string(blob[1 : 1+int(blob[0])])
}

// open decrypts a blob; the error says why it does not.
func (k *Keyring) open(part byte, bucket, key, blob []byte) ([]byte, error) {
	name := blobKey(blob)
	if name == "" || len(blob) < 1+len(name)+nonceSize+tagSize {
		return nil, fmt.Errorf("an encrypted value of %d bytes is too short", len(blob))
	}
	rk := k.find(name)
	if rk == nil {
		return nil, fmt.Errorf("it is encrypted with key %s, which %s does not hold", name, k.file)
	}
	body := blob[1+len(name):]
	plain, err := rk.aead.Open(nil, body[:nonceSize], body[nonceSize:], additional(part, bucket, key))
	if err != nil {
		return nil, fmt.Errorf("it fails its authentication tag (key %s)", name)
	}
	return plain, nil
}

// recParts is a job's record (or head) split into its fields.
type recParts struct {
	pre                                      []byte // version, state, sequence, enqueued, not before, attempts
	queue, headers, client, lastErr, payload []byte
	trail                                    []trailParts
	rest                                     []byte // unique key, workflow
}

type trailParts struct{ fixed, kind, worker, reason []byte }

// splitRecord splits a record or head, in clear or encrypted.
func splitRecord(msgid, b []byte) (recParts, error) {
	var p recParts
	if !knownVersion(b) {
		return p, fmt.Errorf("%w: the record of job %q has an unknown version", ErrCorrupt, msgid)
	}
	r := reader{b: b[recFields:]}
	r.varint()
	r.varint()
	r.uvarint()
	p.pre = b[:len(b)-len(r.b)]
	p.queue, p.headers, p.client, p.lastErr, p.payload = r.bytes(), r.bytes(), r.bytes(), r.bytes(), r.bytes()
	if recVersion(b) >= 2 {
		n := r.uvarint()
		for i := uint64(0); i < n && !r.bad; i++ {
			from := r.b
			r.varint()
			r.uvarint()
			e := trailParts{fixed: from[:len(from)-len(r.b)]}
			e.kind, e.worker, e.reason = r.bytes(), r.bytes(), r.bytes()
			p.trail = append(p.trail, e)
		}
	}
	p.rest = r.b
	if r.bad {
		return p, fmt.Errorf("%w: the record of job %q is truncated", ErrCorrupt, msgid)
	}
	return p, nil
}

func appendField(b, f []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(f)))
	return append(b, f...)
}

// encrypted reports a job record (or head) whose secrets are encrypted.
func encrypted(rec []byte) bool { return len(rec) > 0 && rec[0]&encFlag != 0 }

// encryptJob is a whole record in clear, encrypted.
func (k *Keyring) encryptJob(msgid, rec []byte) ([]byte, error) {
	if encrypted(rec) {
		return rec, nil
	}
	if isHead(rec) {
		return nil, fmt.Errorf("store: job %q: a head is never stored", msgid)
	}
	p, err := splitRecord(msgid, rec)
	if err != nil {
		return nil, err
	}
	n := binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + len(p.headers) + len(p.lastErr) + binary.MaxVarintLen64
	for _, e := range p.trail {
		n += binary.MaxVarintLen64 + len(e.reason)
	}
	head := make([]byte, 0, n)
	head = binary.AppendUvarint(head, uint64(len(p.payload)))
	head = appendField(head, p.headers)
	head = appendField(head, p.lastErr)
	head = binary.AppendUvarint(head, uint64(len(p.trail)))
	for _, e := range p.trail {
		head = appendField(head, e.reason)
	}
	size := len(rec) - len(p.headers) - len(p.lastErr) + 2*(k.blobSize(0)+binary.MaxVarintLen64) + len(head)
	out := make([]byte, 0, size)
	out = append(out, p.pre...)
	out[0] |= encFlag
	out = appendField(out, p.queue)
	out = binary.AppendUvarint(out, uint64(k.blobSize(len(head))))
	out = k.seal(out, partHead, BucketJobs, msgid, head)
	out = appendField(out, p.client)
	out = appendField(out, nil) // the last error: in the head part
	if len(p.payload) == 0 {
		out = appendField(out, nil)
	} else {
		out = binary.AppendUvarint(out, uint64(k.blobSize(len(p.payload))))
		out = k.seal(out, partPayload, BucketJobs, msgid, p.payload)
	}
	if recVersion(rec) >= 2 {
		out = binary.AppendUvarint(out, uint64(len(p.trail)))
		for _, e := range p.trail {
			out = append(out, e.fixed...)
			out = appendField(out, e.kind)
			out = appendField(out, e.worker)
			out = appendField(out, nil) // the reason: in the head part
		}
	}
	return append(out, p.rest...), nil
}

// decryptJob is an encrypted record (or head) in clear: whole, or only
// its head (the payload not read, nor decrypted). A record in clear is
// given as it is (whole) or its head.
func (k *Keyring) decryptJob(msgid, rec []byte, whole bool) ([]byte, error) {
	if !encrypted(rec) {
		if whole || isHead(rec) {
			return rec, nil
		}
		return Head(msgid, rec)
	}
	p, err := splitRecord(msgid, rec)
	if err != nil {
		return nil, err
	}
	plain, err := k.open(partHead, BucketJobs, msgid, p.headers)
	if err != nil {
		return nil, fmt.Errorf("its head: %w", err)
	}
	h := reader{b: plain}
	size := h.uvarint()
	headers, lastErr := h.bytes(), h.bytes()
	reasons := make([][]byte, h.uvarint())
	for i := range reasons {
		if h.bad {
			break
		}
		reasons[i] = h.bytes()
	}
	if h.bad || len(h.b) != 0 || (!isHead(rec) && len(reasons) != len(p.trail)) {
		return nil, fmt.Errorf("%w: the encrypted head of job %q does not read", ErrCorrupt, msgid)
	}
	head := isHead(rec) || !whole
	var payload []byte
	if !head && len(p.payload) > 0 {
		if payload, err = k.open(partPayload, BucketJobs, msgid, p.payload); err != nil {
			return nil, fmt.Errorf("its payload: %w", err)
		}
		if uint64(len(payload)) != size {
			return nil, fmt.Errorf("%w: the payload of job %q is %d bytes, its head says %d", ErrCorrupt, msgid, len(payload), size)
		}
	}
	n := len(p.pre) + len(p.queue) + len(plain) + len(p.client) + len(p.rest) + 8*binary.MaxVarintLen64
	if !head {
		n += len(payload) + len(rec) - len(p.pre) - len(p.queue) - len(p.headers) - len(p.client) - len(p.payload) // the trail
	}
	out := make([]byte, 0, n)
	out = append(out, p.pre...)
	out[0] &^= encFlag
	out = appendField(out, p.queue)
	out = appendField(out, headers)
	out = appendField(out, p.client)
	out = appendField(out, lastErr)
	if head {
		out[0] |= headFlag
		out = appendField(out, binary.AppendUvarint(nil, size))
		if recVersion(rec) >= 2 {
			out = append(out, 0) // no trail
		}
		return append(out, p.rest...), nil
	}
	out = appendField(out, payload)
	if recVersion(rec) >= 2 {
		out = binary.AppendUvarint(out, uint64(len(p.trail)))
		for i, e := range p.trail {
			out = append(out, e.fixed...)
			out = appendField(out, e.kind)
			out = appendField(out, e.worker)
			out = appendField(out, reasons[i])
		}
	}
	return append(out, p.rest...), nil
}

// resultFlag, in the first byte of a kept result's expiry, says the
// result is encrypted (an expiry is a positive int64).
const resultFlag = 0x80

func (k *Keyring) encryptResult(msgid, v []byte) []byte {
	if len(v) <= 8 || v[0]&resultFlag != 0 {
		return v // no result: its expiry only
	}
	out := make([]byte, 8, 8+k.blobSize(len(v)-8))
	copy(out, v[:8])
	out[0] |= resultFlag
	return k.seal(out, partResult, BucketResults, msgid, v[8:])
}

func (k *Keyring) decryptResult(msgid, v []byte) ([]byte, error) {
	if len(v) < 8 || v[0]&resultFlag == 0 {
		return v, nil
	}
	plain, err := k.open(partResult, BucketResults, msgid, v[8:])
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8, 8+len(plain))
	copy(out, v[:8])
	out[0] &^= resultFlag
	return append(out, plain...), nil
}

func (k *Keyring) encryptSchedule(id, v []byte) []byte {
	if len(v) == 0 || v[0]&encFlag != 0 {
		return v
	}
	return k.seal(append(make([]byte, 0, 1+k.blobSize(len(v))), v[0]|encFlag), partSchedule, BucketSchedules, id, v)
}

func (k *Keyring) decryptSchedule(id, v []byte) ([]byte, error) {
	if len(v) == 0 || v[0]&encFlag == 0 {
		return v, nil
	}
	plain, err := k.open(partSchedule, BucketSchedules, id, v[1:])
	if err != nil {
		return nil, err
	}
	if len(plain) == 0 || plain[0] != v[0]&^encFlag {
		return nil, fmt.Errorf("%w: the encrypted record of schedule %q does not read", ErrCorrupt, id)
	}
	return plain, nil
}

// encryptedBucket reports a bucket whose values are encrypted.
func encryptedBucket(bucket []byte) bool {
	return bytes.Equal(bucket, BucketJobs) || bytes.Equal(bucket, BucketResults) || bytes.Equal(bucket, BucketSchedules)
}

// encryptValue is a value of bucket's key as it is stored.
func (k *Keyring) encryptValue(bucket, key, v []byte) ([]byte, error) {
	switch {
	case v == nil:
		return nil, nil
	case bytes.Equal(bucket, BucketJobs):
		return k.encryptJob(key, v)
	case bytes.Equal(bucket, BucketResults):
		return k.encryptResult(key, v), nil
	case bytes.Equal(bucket, BucketSchedules):
		return k.encryptSchedule(key, v), nil
	}
	return v, nil
}

// decryptValue is a stored value of bucket's key in clear; a job's
// record whole, or its head.
func (k *Keyring) decryptValue(bucket, key, v []byte, whole bool) ([]byte, error) {
	switch {
	case v == nil:
		return nil, nil
	case bytes.Equal(bucket, BucketJobs):
		return k.decryptJob(key, v, whole)
	case bytes.Equal(bucket, BucketResults):
		return k.decryptResult(key, v)
	case bytes.Equal(bucket, BucketSchedules):
		return k.decryptSchedule(key, v)
	}
	return v, nil
}

// valueEncrypted reports whether a stored value of bucket is encrypted.
func valueEncrypted(bucket, v []byte) bool {
	switch {
	case len(v) == 0:
		return false
	case bytes.Equal(bucket, BucketJobs), bytes.Equal(bucket, BucketSchedules):
		return v[0]&encFlag != 0
	case bytes.Equal(bucket, BucketResults):
		return len(v) > 8 && v[0]&resultFlag != 0
	}
	return false
}

// sealedWith names the key a stored value of bucket's key is encrypted
// with; ok is false for a value in clear (or one holding no secret: a
// result's expiry alone), and the name is "" for one that does not read.
func sealedWith(bucket, key, v []byte) (name string, ok bool) {
	if !valueEncrypted(bucket, v) {
		return "", false
	}
	switch {
	case bytes.Equal(bucket, BucketJobs):
		p, err := splitRecord(key, v)
		if err != nil {
			return "", true
		}
		return blobKey(p.headers), true
	case bytes.Equal(bucket, BucketResults):
		return blobKey(v[8:]), true
	}
	return blobKey(v[1:]), true // a schedule
}

// salvageJob is what decrypts of a damaged encrypted record: its fields
// in clear, and of its head part and its payload each that decrypts.
func (k *Keyring) salvageJob(msgid, rec []byte) (*Job, error) {
	j, err := decodeRecord(msgid, rec, false)
	if err != nil {
		return nil, err
	}
	p, err := splitRecord(msgid, rec)
	if err != nil {
		return nil, err
	}
	j.head, j.Headers, j.LastError, j.Payload = false, "", "", nil
	for i := range j.Trail {
		j.Trail[i].Reason = ""
	}
	if plain, err := k.open(partHead, BucketJobs, msgid, p.headers); err == nil {
		h := reader{b: plain}
		h.uvarint()
		j.Headers, j.LastError = string(h.bytes()), string(h.bytes())
		n := h.uvarint()
		for i := uint64(0); i < n && !h.bad && int(i) < len(j.Trail); i++ {
			j.Trail[i].Reason = string(h.bytes())
		}
	}
	if len(p.payload) > 0 {
		if plain, err := k.open(partPayload, BucketJobs, msgid, p.payload); err == nil {
			j.Payload = plain
		}
	}
	j.PayloadSize = len(j.Payload)
	return j, nil
}

// ResultExpiry is the expiry (8 bytes) of a stored result value v,
// encrypted or not.
func ResultExpiry(v []byte) []byte {
	exp := bytes.Clone(v[:8])
	exp[0] &^= resultFlag
	return exp
}
