package store

import "encoding/binary"

// The journal's layout: its buckets and how their keys are made, the
// same in every backend (a bbolt bucket, or an etcd key range). Package
// migrations creates the buckets in a bbolt file, step by step; doc.go
// draws what each holds.
var (
	BucketMeta      = []byte("meta")       // schema version and other journal-wide facts
	BucketJobs      = []byte("jobs")       // msgid -> job record
	BucketPending   = []byte("pending")    // queue key + seq -> msgid: per-queue FIFO of pending jobs
	BucketDead      = []byte("dead")       // queue key + seq -> msgid: dead letters
	BucketResults   = []byte("results")    // msgid -> expiry (8 bytes, unix ns) + result payload
	BucketResultExp = []byte("result_exp") // expiry (8 bytes, unix ns) + msgid -> nothing
	BucketSchedules = []byte("schedules")  // schedule id -> schedule record
	BucketQueues    = []byte("queues")     // queue name -> its controls, JSON
	BucketDone      = []byte("done")       // queue key + seq -> msgid: jobs done, kept with their result
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
