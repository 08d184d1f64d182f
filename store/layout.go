package store

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// The journal's layout: its buckets and how their keys are made, the
// same in every backend (a bbolt bucket, or an etcd key range). Package
// migrations creates the buckets in a bbolt file, step by step; doc.go
// draws what each holds.
var (
	BucketMeta      = []byte("meta")        // schema version and other journal-wide facts
	BucketJobs      = []byte("jobs")        // msgid -> job record
	BucketPending   = []byte("pending")     // queue key + seq -> msgid: per-queue FIFO of pending jobs
	BucketDead      = []byte("dead")        // queue key + seq -> msgid: dead letters
	BucketResults   = []byte("results")     // msgid -> expiry (8 bytes, unix ns) + result payload
	BucketResultExp = []byte("result_exp")  // expiry (8 bytes, unix ns) + msgid -> nothing
	BucketSchedules = []byte("schedules")   // schedule id -> schedule record
	BucketQueues    = []byte("queues")      // queue name -> its controls, JSON
	BucketDone      = []byte("done")        // queue key + seq -> msgid: jobs done, kept with their result
	BucketDamaged   = []byte("damaged")     // bucket "/" key -> what failed its checksum, and why (Quarantine)
	BucketCancelled = []byte("cancelled")   // queue key + seq -> msgid: jobs cancelled, kept like done ones
	BucketUnique    = []byte("unique")      // queue key + unique key -> expiry (8; 0 = held by a live job) + msgid
	BucketUniqueExp = []byte("unique_exp")  // expiry (8) + unique index key -> nothing: holds that end
	BucketWaiting   = []byte("waiting")     // queue key + seq -> msgid: jobs waiting for others (workflow.go)
	BucketAfter     = []byte("after")       // len + parent msgid + child msgid -> nothing: who waits for whom
	BucketBatches   = []byte("batches")     // batch name -> its record (open, counts by state, waiters)
	BucketAfterB    = []byte("after_batch") // len + batch name + child msgid -> nothing: who waits for a batch
	BucketSettling  = []byte("settling")    // 'j' msgid or 'b' batch name -> status: ends whose children are not all settled
	BucketTenants   = []byte("tenants")     // queue key + tenant -> the tenant's settings, JSON
	BucketLimiters  = []byte("limiters")    // limiter name -> its settings, JSON
)

// ResultExpKey is the result_exp index key for an expiry (8 bytes, big
// endian unix ns) and a msgid.
func ResultExpKey(expiry, msgid []byte) []byte {
	k := make([]byte, 0, len(expiry)+len(msgid))
	return append(append(k, expiry...), msgid...)
}

// ExpiryBytes encodes unix nanoseconds as 8 big-endian bytes.
func ExpiryBytes(unixNano int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(unixNano))
}

// boltstore's file keeps every value sealed: the value, then 4 bytes,
// the CRC-32C (little-endian) of the bucket's name, a zero, the key, a
// zero and the value; a value moved under another key fails as surely as
// one whose bytes changed. (The schema version in meta, which package
// migrations reads before anything else, is not sealed.)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SchemaKey is meta's key of the file's schema version (package
// migrations'), the one value not sealed.
var SchemaKey = []byte("schema")

// Sealed reports whether bucket's key holds a sealed value: all but the
// schema version.
func Sealed(bucket, key []byte) bool {
	return !bytes.Equal(bucket, BucketMeta) || !bytes.Equal(key, SchemaKey)
}

// Seal is val as the file keeps it under bucket and key.
func Seal(bucket, key, val []byte) []byte {
	out := make([]byte, len(val)+4)
	copy(out, val)
	binary.LittleEndian.PutUint32(out[len(val):], sealSum(bucket, key, val))
	return out
}

// AppendSeal is Seal without a copy: val's checksum appended to val
// (in place when it has the room).
func AppendSeal(bucket, key, val []byte) []byte {
	return binary.LittleEndian.AppendUint32(val, sealSum(bucket, key, val))
}

// Unseal checks a sealed value and returns it without its checksum.
func Unseal(bucket, key, stored []byte) ([]byte, bool) {
	if len(stored) < 4 {
		return nil, false
	}
	val := stored[:len(stored)-4]
	return val, binary.LittleEndian.Uint32(stored[len(stored)-4:]) == sealSum(bucket, key, val)
}

func sealSum(bucket, key, val []byte) uint32 {
	c := crc32.Update(0, castagnoli, bucket)
	c = crc32.Update(c, castagnoli, []byte{0})
	c = crc32.Update(c, castagnoli, key)
	c = crc32.Update(c, castagnoli, []byte{0})
	return crc32.Update(c, castagnoli, val)
}

// QueueKey is a job's key in the pending, dead and done indexes: the
// queue name with its length in front, then the sequence big-endian.
func QueueKey(queue string, seq uint64) []byte { return queueKey(queue, seq) }

// IndexOf is the index bucket of jobs in state s.
func IndexOf(s State) []byte { return index(s) }

// DecodeJob reads a job record (a backend's tools: check, salvage); of
// an encrypted one (encrypt.go), the encrypted parts stand for its
// headers and payload.
func DecodeJob(msgid, rec []byte) (*Job, error) { return decodeRecord(msgid, rec, true) }

// IndexEntry is the index entry of job msgid whose record (or head) is
// rec: the bucket of its state and its key there; the entry's value is
// msgid. An index is derived from the records alone, so a backend may
// keep it in memory and rebuild it (etcdstore).
func IndexEntry(msgid, rec []byte) (bucket, key []byte, err error) {
	s, key, err := indexKey(msgid, rec)
	if err != nil {
		return nil, nil, err
	}
	return index(s), key, nil
}

// IsIndex reports whether bucket is one of the indexes IndexEntry
// derives (pending, dead, done, cancelled, waiting).
func IsIndex(bucket []byte) bool { return isIndex(bucket) || bytes.Equal(bucket, BucketWaiting) }
