package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// A job's head is its record without its payload and trail: all that a
// write decides on when it does not write the record again (Complete and
// Remove, the duplicate check of an Append, a parent's state), and all
// that Load reads. The journal on etcd keeps each stored job's head in
// memory, since its leader wrote every key etcd holds, and answers those
// reads without a request (HeadReader).
//
// A head is a record whose version byte has headFlag set, whose payload
// field holds the payload's size (a uvarint) instead of its bytes, and
// whose trail is empty. A job decoded from a head is marked so, and
// encoding it panics: its payload is not there to write back.

const headFlag = 0x80

// recVersion is a record's version, head or not, encrypted or not.
func recVersion(b []byte) byte { return b[0] &^ (headFlag | encFlag) }

// isHead reports whether b is a head rather than a whole record.
func isHead(b []byte) bool { return len(b) > 0 && b[0]&headFlag != 0 }

// Head returns the head of job msgid's record rec (rec itself when it is
// one).
func Head(msgid, rec []byte) ([]byte, error) {
	if !knownVersion(rec) {
		return nil, fmt.Errorf("%w: the record of job %q has an unknown version", ErrCorrupt, msgid)
	}
	if isHead(rec) {
		return rec, nil
	}
	r := reader{b: rec[recFields:]}
	r.varint()
	r.varint()
	r.uvarint()
	for range 4 { // queue, headers, client id, last error
		r.bytes()
	}
	start := len(rec) - len(r.b)
	payload := r.bytes()
	if recVersion(rec) >= 2 {
		n := r.uvarint()
		for i := uint64(0); i < n && !r.bad; i++ {
			r.varint()
			r.uvarint()
			r.bytes()
			r.bytes()
			r.bytes()
		}
	}
	if r.bad {
		return nil, fmt.Errorf("%w: the record of job %q is truncated", ErrCorrupt, msgid)
	}
	rest := r.b
	size := binary.AppendUvarint(nil, uint64(len(payload)))
	h := make([]byte, 0, start+1+len(size)+1+len(rest))
	h = append(h, rec[:start]...)
	h[0] |= headFlag
	h = binary.AppendUvarint(h, uint64(len(size)))
	h = append(h, size...)
	if recVersion(rec) >= 2 {
		h = append(h, 0) // no trail
	}
	return append(h, rest...), nil
}

// Part is the part of bucket's key holding v that a write decides on
// (what a HeadReader gives): a job's head, a kept result's expiry, or,
// whole, v itself. A job record that does not decode has no part (nil).
func Part(bucket, key, v []byte) (part []byte, whole bool) {
	switch {
	case bytes.Equal(bucket, BucketJobs):
		h, _ := Head(key, v)
		return h, false
	case bytes.Equal(bucket, BucketResults) && len(v) > 8:
		return v[:8], false
	}
	return v, true
}

// A HeadReader is a Tx that gives a value as a write that decides on it
// reads it: a job's head instead of its record, a kept result's expiry
// (its first 8 bytes) instead of the result. etcdstore answers from its
// memory.
type HeadReader interface {
	Head(bucket, key []byte) []byte
}

// headOf reads bucket's key through t's HeadReader, or whole.
func headOf(t Tx, bucket, key []byte) []byte {
	if h, ok := t.(HeadReader); ok {
		return h.Head(bucket, key)
	}
	return t.Get(bucket, key)
}

// headsOf is headOf of several keys of one bucket: one request (Gets)
// where t reads whole values.
func headsOf(t Tx, bucket []byte, keys [][]byte) [][]byte {
	h, ok := t.(HeadReader)
	if !ok {
		return t.Gets(bucket, keys)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = h.Head(bucket, k)
	}
	return out
}
