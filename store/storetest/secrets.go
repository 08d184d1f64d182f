package storetest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// Secrets writes into j, through every write that stores what users
// would not print, the text marker: a job's payload and headers (small
// and large), a failure's reason (last error, the trail's), a dead
// letter's, a kept result, a schedule's payload and headers. A backend's
// test of encryption at rest then looks for marker in every byte it
// stored (none may hold it), and reads it all back with Secrets' check.
func Secrets(t testing.TB, j store.Journal, marker string) (check func(t testing.TB, j store.Journal)) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	large := bytes.Repeat([]byte(marker+" large payload "), 8<<10) // over 64 KiB: read apart from its head
	jobs := []*store.Job{
		{MsgID: "s-small", Queue: "q", Headers: "secret:" + marker, Payload: []byte("payload " + marker)},
		{MsgID: "s-large", Queue: "q", Headers: "secret:" + marker, Payload: large},
		{MsgID: "s-failed", Queue: "q", Headers: "h:" + marker, Payload: []byte(marker)},
		{MsgID: "s-dead", Queue: "q", Payload: []byte(marker)},
		{MsgID: "s-done", Queue: "q", Payload: []byte(marker)},
		{MsgID: "s-empty", Queue: "q"},
	}
	for _, jb := range jobs {
		_, err := store.Wait(func(done func(bool, error)) { j.Append(jb, done) })
		must("append "+jb.MsgID, err)
	}
	now := time.Now()
	reason := "failed: " + marker
	trail := []store.TrailEvent{{Time: now, Kind: "failed", Worker: "w1", Attempt: 1, Reason: reason}}
	_, err := store.Wait(func(done func(*store.Job, error)) { j.RecordAttempt("s-failed", reason, time.Time{}, trail, done) })
	must("record attempt", err)
	_, err = store.Wait(func(done func(*store.Job, error)) { j.Bury("s-dead", "buried: "+marker, trail, done) })
	must("bury", err)
	_, err = store.Wait(func(done func(bool, error)) {
		j.Complete("s-done", []byte("result "+marker), now.Add(time.Hour), nil, done)
	})
	must("complete", err)
	_, err = store.Wait(func(done func(bool, error)) {
		j.PutSchedule(&store.Schedule{ID: "s-sched", Queue: "q", Headers: "h:" + marker, Payload: []byte("scheduled " + marker),
			Every: time.Hour, Next: now.Add(time.Hour), Left: -1, Created: now}, done)
	})
	must("put schedule", err)
	return func(t testing.TB, j store.Journal) {
		t.Helper()
		for _, want := range jobs {
			got, err := j.Get(want.MsgID)
			if err != nil {
				t.Fatalf("get %s: %v", want.MsgID, err)
			}
			if got.Headers != want.Headers || !bytes.Equal(got.Payload, want.Payload) {
				t.Fatalf("%s: headers %q, %d payload bytes; want %q, %d", want.MsgID, got.Headers, len(got.Payload), want.Headers, len(want.Payload))
			}
		}
		if got, _ := j.Get("s-failed"); got.LastError != reason || len(got.Trail) != 1 || got.Trail[0].Reason != reason {
			t.Fatalf("s-failed: last error %q, trail %+v; want %q", got.LastError, got.Trail, reason)
		}
		if got, _ := j.Get("s-dead"); got.State != store.Dead || got.LastError != "buried: "+marker {
			t.Fatalf("s-dead: %v %q", got.State, got.LastError)
		}
		if r, err := j.Result("s-done"); err != nil || string(r) != "result "+marker {
			t.Fatalf("result: %q, %v", r, err)
		}
		s, err := j.GetSchedule("s-sched")
		if err != nil || s.Headers != "h:"+marker || string(s.Payload) != "scheduled "+marker {
			t.Fatalf("schedule: %+v, %v", s, err)
		}
		var loaded []string
		if err := j.Load(func(jb *store.Job) error {
			loaded = append(loaded, fmt.Sprintf("%s:%d", jb.MsgID, jb.PayloadSize))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("s-small:%d s-large:%d s-failed:%d s-empty:0", len(jobs[0].Payload), len(large), len(marker))
		if got := strings.Join(loaded, " "); got != want {
			t.Fatalf("loaded %s; want %s", got, want)
		}
	}
}
