package store

import (
	"testing"
	"time"
)

// A version 1 record (before trails) reads as a job with no trail, and a
// version 2 record keeps its trail.
func TestRecordVersions(t *testing.T) {
	j := &Job{MsgID: "m", Queue: "q", Headers: "h:1", Payload: []byte("p"), Enqueued: time.Unix(1800000000, 0),
		Attempts: 2, LastError: "e", State: Pending, Seq: 7}
	v1 := j.encode()
	v1 = v1[:len(v1)-1] // no trail count
	v1[0] = 1
	got, err := decodeJob([]byte("m"), v1, true)
	if err != nil || got.Queue != "q" || string(got.Payload) != "p" || got.Attempts != 2 || got.Trail != nil {
		t.Fatalf("version 1: %+v, %v", got, err)
	}
	j.Trail = []TrailEvent{{Time: time.Unix(1800000001, 5), Kind: "failed", Worker: "w", Attempt: 2, Reason: "r"}}
	got, err = decodeJob([]byte("m"), j.encode(), false)
	if err != nil || len(got.Trail) != 1 || got.Trail[0] != (TrailEvent{Time: time.Unix(1800000001, 5), Kind: "failed", Worker: "w", Attempt: 2, Reason: "r"}) || got.PayloadSize != 1 {
		t.Fatalf("version 2: %+v, %v", got, err)
	}
	bad := j.encode()
	bad[0] = 3
	if _, err := decodeJob([]byte("m"), bad, false); err == nil {
		t.Fatal("an unknown version decoded")
	}
}

// A version 3 record keeps the unique key and its hold beside everything
// else; uniqueOf reads the same without decoding the rest; a job without
// a key stays version 2.
func TestUniqueRecord(t *testing.T) {
	j := &Job{MsgID: "m", Queue: "q", Headers: "unique:k", Payload: []byte("p"), ClientID: []byte{0, 1},
		LastError: "e", Trail: []TrailEvent{{Time: time.Unix(5, 0), Kind: "failed", Worker: "w", Attempt: 2, Reason: "r"}},
		Unique: "user-42", UniqueFor: time.Hour, State: Pending, Seq: 9}
	rec := j.encode()
	if rec[0] != uniqueVersion {
		t.Fatalf("version %d", rec[0])
	}
	got, err := decodeJob([]byte("m"), rec, true)
	if err != nil || got.Unique != "user-42" || got.UniqueFor != time.Hour || len(got.Trail) != 1 || string(got.Payload) != "p" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	q, k, hold, err := uniqueOf([]byte("m"), rec)
	if err != nil || string(q) != "q" || string(k) != "user-42" || hold != time.Hour {
		t.Fatalf("uniqueOf: %q %q %v %v", q, k, hold, err)
	}
	if _, _, _, err := uniqueOf([]byte("m"), rec[:len(rec)-3]); err == nil {
		t.Fatal("uniqueOf of a truncated record: no error")
	}
	j.Unique, j.UniqueFor = "", 0
	if v := j.encode()[0]; v != recordVersion {
		t.Fatalf("a job without a key written as version %d", v)
	}
}
