package store

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A head decodes to the job its record does, less the payload (its size
// kept) and the trail; what a write reads of a record it reads the same
// of the head; the head gives no payload, and a job decoded from it is
// never written back.
func TestHead(t *testing.T) {
	trail := []TrailEvent{{Time: time.Unix(5, 0), Kind: "failed", Worker: "w", Attempt: 2, Reason: "r"}}
	for _, j := range []*Job{
		{MsgID: "plain", Queue: "q", Headers: "h:1", Payload: []byte("payload"), ClientID: []byte{0, 1}, LastError: "e",
			Enqueued: time.Unix(1800000000, 0), Attempts: 2, State: Pending, Seq: 7},
		{MsgID: "trail", Queue: "q", Payload: bytes.Repeat([]byte("x"), 300), Trail: trail, State: Dead, Seq: 8},
		{MsgID: "unique", Queue: "q", Payload: []byte("p"), Trail: trail, Unique: "k", UniqueFor: time.Hour, State: Pending, Seq: 9},
		{MsgID: "flow", Queue: "q", Payload: []byte("p"), Trail: trail, After: []string{"a", "b"}, AfterBatch: "b1", Batch: "b2",
			RunIfFailed: true, Waits: 2, State: Waiting, Seq: 10},
		{MsgID: "done", Queue: "q", Finished: time.Unix(1800000005, 0), State: Done, Seq: 11},
	} {
		id := []byte(j.MsgID)
		rec := j.encode()
		h, err := Head(id, rec)
		if err != nil {
			t.Fatalf("%s: %v", j.MsgID, err)
		}
		if !isHead(h) || isHead(rec) || len(j.Payload) > 16 && len(h) >= len(rec) {
			t.Errorf("%s: head of %d bytes from a record of %d", j.MsgID, len(h), len(rec))
		}
		if again, err := Head(id, h); err != nil || !bytes.Equal(again, h) {
			t.Errorf("%s: the head of a head: %v", j.MsgID, err)
		}
		want, _ := decodeJob(id, rec, false)
		got, err := decodeJob(id, h, false)
		if err != nil {
			t.Fatalf("%s: %v", j.MsgID, err)
		}
		want.Trail, want.head = nil, true
		if d := jobDiff(got, want); d != "" {
			t.Errorf("%s: the head decodes to %s", j.MsgID, d)
		}
		s1, k1, err1 := indexKey(id, rec)
		s2, k2, err2 := indexKey(id, h)
		if s1 != s2 || !bytes.Equal(k1, k2) || err1 != nil || err2 != nil {
			t.Errorf("%s: indexKey %v %q / %v %q", j.MsgID, s1, k1, s2, k2)
		}
		b1, _ := workflowOf(id, rec)
		b2, _ := workflowOf(id, h)
		if b1 != b2 {
			t.Errorf("%s: workflowOf %q, of the head %q", j.MsgID, b1, b2)
		}
		if j.Unique != "" {
			q1, u1, h1, _ := uniqueOf(id, rec)
			q2, u2, h2, err := uniqueOf(id, h)
			if err != nil || !bytes.Equal(q1, q2) || !bytes.Equal(u1, u2) || h1 != h2 {
				t.Errorf("%s: uniqueOf of the head %q %q %v, %v", j.MsgID, q2, u2, h2, err)
			}
		}
		if _, err := decodeJob(id, h, true); err == nil || !strings.Contains(err.Error(), "no payload") {
			t.Errorf("%s: a head decoded with its payload: %v", j.MsgID, err)
		}
		if _, err := payloadOf(id, h); err == nil {
			t.Errorf("%s: payloadOf a head: no error", j.MsgID)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: a job read as its head was encoded", j.MsgID)
				}
			}()
			got.encode()
		}()
	}
	if _, err := Head([]byte("m"), []byte{9, 1, 0, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Error("the head of an unknown version: no error")
	}
	rec := (&Job{MsgID: "m", Queue: "q", Payload: []byte("p"), State: Pending}).encode()
	if _, err := Head([]byte("m"), rec[:12]); err == nil {
		t.Error("the head of a truncated record: no error")
	}
}

// jobDiff says how two decoded jobs differ, "" if not.
func jobDiff(a, b *Job) string {
	var d []string
	if a.MsgID != b.MsgID || a.Queue != b.Queue || a.Headers != b.Headers || !bytes.Equal(a.ClientID, b.ClientID) || a.LastError != b.LastError {
		d = append(d, "ids, queue, headers, client or error")
	}
	if !a.Enqueued.Equal(b.Enqueued) || !a.NotBefore.Equal(b.NotBefore) || !a.Finished.Equal(b.Finished) {
		d = append(d, "times")
	}
	if a.Attempts != b.Attempts || a.State != b.State || a.Seq != b.Seq || a.PayloadSize != b.PayloadSize || a.head != b.head {
		d = append(d, "attempts, state, seq, payload size or head")
	}
	if len(a.Trail) != len(b.Trail) || a.Unique != b.Unique || a.UniqueFor != b.UniqueFor {
		d = append(d, "trail or unique key")
	}
	if strings.Join(a.After, ",") != strings.Join(b.After, ",") || a.AfterBatch != b.AfterBatch || a.Batch != b.Batch ||
		a.RunIfFailed != b.RunIfFailed || a.Waits != b.Waits {
		d = append(d, "workflow")
	}
	return strings.Join(d, "; ")
}

// Whatever bytes a record holds, decoding it and taking its head neither
// panics nor disagrees: a head decodes to the job its record does.
func FuzzRecord(f *testing.F) {
	for _, j := range []*Job{
		{MsgID: "m", Queue: "q", Headers: "h:1", Payload: []byte("payload"), State: Pending, Seq: 7},
		{MsgID: "m", Queue: "q", Payload: []byte("p"), Trail: []TrailEvent{{Kind: "failed", Reason: "r"}}, Unique: "k", State: Pending},
		{MsgID: "m", Queue: "q", After: []string{"a"}, Batch: "b", Waits: 1, State: Waiting},
	} {
		f.Add(j.encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id := []byte("m")
		whole, errWhole := decodeJob(id, b, true)
		indexKey(id, b)
		uniqueOf(id, b)
		h, err := Head(id, b)
		if err != nil {
			return
		}
		got, err := decodeJob(id, h, false)
		if isHead(b) || errWhole != nil {
			return
		}
		if err != nil {
			t.Fatalf("the record decodes, its head does not: %v", err)
		}
		whole.Trail, whole.head, whole.Payload = nil, true, nil
		if d := jobDiff(got, whole); d != "" {
			t.Fatalf("the head decodes to %s", d)
		}
	})
}
