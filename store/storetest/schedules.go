package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// schedule is a new schedule with every field set.
func schedule(id string) *store.Schedule {
	return &store.Schedule{
		ID: id, Queue: "q", Headers: "run_count:3,nohaste", Payload: []byte{0, 's', 0xff},
		Every: 90 * time.Second, Next: time.Unix(1800000000, 123), Left: 3,
		Created: time.Unix(1700000000, 5),
	}
}

func (f *fixture) putSchedule(s *store.Schedule) (created bool) {
	f.t.Helper()
	created, err := store.Wait(func(done func(bool, error)) { f.j.PutSchedule(s, done) })
	if err != nil {
		f.t.Fatalf("put schedule %s: %v", s.ID, err)
	}
	return created
}

func (f *fixture) getSchedule(id string) *store.Schedule {
	f.t.Helper()
	s, err := f.j.GetSchedule(id)
	if err != nil {
		f.t.Fatalf("get schedule %s: %v", id, err)
	}
	return s
}

type fired struct {
	job *store.Job
	dup bool
}

func (f *fixture) fire(id string, due, next time.Time, msgid string) (*store.Job, bool, error) {
	f.t.Helper()
	o, err := store.Wait(func(done func(fired, error)) {
		f.j.FireSchedule(id, due, next, msgid, func(j *store.Job, dup bool, err error) { done(fired{j, dup}, err) })
	})
	return o.job, o.dup, err
}

// diffSchedule says how got differs from want ("" when it does not).
func diffSchedule(got, want *store.Schedule) string {
	g, w := *got, *want
	for _, s := range []*store.Schedule{&g, &w} { // instants, not locations
		s.Next, s.LastFire, s.Created = s.Next.UTC(), s.LastFire.UTC(), s.Created.UTC()
	}
	if !bytes.Equal(g.Payload, w.Payload) {
		return fmt.Sprintf("payload %q, want %q", g.Payload, w.Payload)
	}
	g.Payload, w.Payload = nil, nil
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("%+v, want %+v", g, w)
	}
	return ""
}

// A schedule is stored with every field, replaced by its id, listed,
// and kept across a reopen.
func putScheduleKeepsEveryField(t *testing.T, f *fixture) {
	s := schedule("s1")
	if !f.putSchedule(s) {
		t.Error("a new schedule was not reported created")
	}
	if d := diffSchedule(f.getSchedule("s1"), s); d != "" {
		t.Fatalf("stored: %s", d)
	}
	s2 := schedule("s1")
	s2.Cron, s2.Every, s2.Paused = "*/5 * * * *", 0, true
	if f.putSchedule(s2) {
		t.Error("replacing a schedule was reported as creating one")
	}
	f.putSchedule(schedule("s0"))
	f.reopen()
	var got []*store.Schedule
	if err := f.j.LoadSchedules(func(s *store.Schedule) error { got = append(got, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "s0" || diffSchedule(got[1], s2) != "" {
		t.Fatalf("loaded after a reopen: %d schedules, first %q; want s0 and the replaced s1", len(got), got[0].ID)
	}
	for _, id := range []string{"s2", "s3", "s4"} {
		f.putSchedule(schedule(id))
	}
	var pages [][]string
	for after := ""; ; {
		page, next, err := f.j.ListSchedules(after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range page {
			ids = append(ids, s.ID)
		}
		pages = append(pages, ids)
		if after = next; after == "" {
			break
		}
	}
	if fmt.Sprint(pages) != "[[s0 s1] [s2 s3] [s4]]" {
		t.Fatalf("listed by twos: %v, want [[s0 s1] [s2 s3] [s4]]", pages)
	}
	if page, next, err := f.j.ListSchedules("s1a", 0); err != nil || len(page) != 3 || page[0].ID != "s2" || next != "" {
		t.Fatalf("listed after an id no schedule has: %d schedules, next %q, %v", len(page), next, err)
	}
	for _, id := range []string{"s2", "s3", "s4"} {
		store.Wait(func(done func(bool, error)) { f.j.RemoveSchedule(id, done) })
	}
	if _, err := f.j.GetSchedule("nope"); !errors.Is(err, store.ErrNoSchedule) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of an unknown schedule: %v, want ErrNoSchedule (an ErrNotFound)", err)
	}
	for _, bad := range []*store.Schedule{{Queue: "q"}, {ID: "x"}, {ID: string(make([]byte, 256)), Queue: "q"}} {
		if _, err := store.Wait(func(done func(bool, error)) { f.j.PutSchedule(bad, done) }); !errors.Is(err, store.ErrBadSchedule) {
			t.Errorf("put of schedule %q in queue %q: %v, want ErrBadSchedule", bad.ID, bad.Queue, err)
		}
	}
}

// Removing and pausing a schedule; of an unknown one: not found.
func removeAndPauseSchedules(t *testing.T, f *fixture) {
	f.putSchedule(schedule("s"))
	s, err := store.Wait(func(done func(*store.Schedule, error)) { f.j.PauseSchedule("s", true, done) })
	if err != nil || !s.Paused || !f.getSchedule("s").Paused {
		t.Fatalf("pause: %+v, %v", s, err)
	}
	if _, _, err := f.fire("s", s.Next, s.Next.Add(s.Every), "s@paused"); !errors.Is(err, store.ErrWrongState) {
		t.Fatalf("fire of a paused schedule: %v, want ErrWrongState", err)
	}
	f.gone("s@paused")
	if s, err = store.Wait(func(done func(*store.Schedule, error)) { f.j.PauseSchedule("s", false, done) }); err != nil || s.Paused {
		t.Fatalf("resume: %+v, %v", s, err)
	}
	if _, err := store.Wait(func(done func(*store.Schedule, error)) { f.j.PauseSchedule("nope", true, done) }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("pause of an unknown schedule: %v, want ErrNotFound", err)
	}
	for i, want := range []bool{true, false} {
		found, err := store.Wait(func(done func(bool, error)) { f.j.RemoveSchedule("s", done) })
		if err != nil || found != want {
			t.Errorf("remove %d: found=%v %v, want %v", i+1, found, err, want)
		}
	}
	if _, err := f.j.GetSchedule("s"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a removed schedule: %v", err)
	}
}

// A fire makes one pending job of the schedule's queue, headers and
// payload, counts itself and moves Next on, all at once; the same due
// time fired again makes nothing; a skipped fire moves Next only.
func fireMakesOneJobAndMovesNext(t *testing.T, f *fixture) {
	s := schedule("s")
	f.putSchedule(s)
	due, next := s.Next, s.Next.Add(s.Every)
	j, dup, err := f.fire("s", due, next, "s@1")
	if err != nil || dup || j == nil || j.MsgID != "s@1" || j.Seq == 0 {
		t.Fatalf("fire: %s dup=%v %v", describe(j), dup, err)
	}
	stored := f.get("s@1")
	if stored.Queue != s.Queue || stored.Headers != s.Headers || !bytes.Equal(stored.Payload, s.Payload) || stored.State != store.Pending {
		t.Fatalf("the fire's job: %s; want the schedule's queue, headers and payload, pending", describe(stored))
	}
	got := f.getSchedule("s")
	if !got.Next.Equal(next) || got.Fires != 1 || !got.LastFire.Equal(due) || got.Left != 2 {
		t.Fatalf("after a fire: next %v fires %d last %v left %d", got.Next, got.Fires, got.LastFire, got.Left)
	}
	if _, _, err := f.fire("s", due, next.Add(s.Every), "s@1-again"); !errors.Is(err, store.ErrWrongState) {
		t.Fatalf("the same due time fired again: %v, want ErrWrongState", err)
	}
	f.gone("s@1-again")
	if j, _, err := f.fire("s", next, next.Add(s.Every), ""); err != nil || j != nil {
		t.Fatalf("a skipped fire: %v %v", describe(j), err)
	}
	got = f.getSchedule("s")
	if !got.Next.Equal(next.Add(s.Every)) || got.Fires != 1 || got.Left != 2 {
		t.Fatalf("after a skip: next %v fires %d left %d; want Next moved only", got.Next, got.Fires, got.Left)
	}
	if ids := f.pending()["q"]; !reflect.DeepEqual(ids, []string{"s@1"}) {
		t.Fatalf("pending %v, want the one fire's job", ids)
	}
	if _, _, err := f.fire("nope", due, next, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("fire of an unknown schedule: %v, want ErrNotFound", err)
	}
}

// A schedule with a run count ends with its last fire; one given no next
// time ends too. A fire whose msgid is stored already makes no second job
// and still counts.
func fireEndsSchedules(t *testing.T, f *fixture) {
	s := schedule("two")
	s.Left = 2
	f.putSchedule(s)
	due := s.Next
	for i := range 2 {
		if _, _, err := f.fire("two", due, due.Add(time.Minute), fmt.Sprint("two@", i)); err != nil {
			t.Fatalf("fire %d: %v", i, err)
		}
		due = due.Add(time.Minute)
	}
	if _, err := f.j.GetSchedule("two"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a schedule out of fires: %v, want it removed", err)
	}
	last := schedule("last")
	last.Left = -1
	f.putSchedule(last)
	if _, _, err := f.fire("last", last.Next, time.Time{}, "last@0"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.j.GetSchedule("last"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a schedule given no next time: %v, want it removed", err)
	}
	f.append(job("taken", "q"))
	again := schedule("again")
	f.putSchedule(again)
	j, dup, err := f.fire("again", again.Next, again.Next.Add(time.Hour), "taken")
	if err != nil || !dup || j == nil {
		t.Fatalf("a fire whose msgid is stored: %s dup=%v %v; want dup", describe(j), dup, err)
	}
	if got := f.get("taken"); got.Headers != job("taken", "q").Headers {
		t.Errorf("the stored job was changed by the duplicate fire: %s", describe(got))
	}
	if got := f.getSchedule("again"); got.Fires != 1 {
		t.Errorf("a duplicate fire was not counted: fires %d", got.Fires)
	}
}

// A schedule whose fires, with any msgid, would be over the backend's job
// size limit is ErrTooLarge, naming the limit: it could never fire.
func tooLargeScheduleIsRefused(t *testing.T, f *fixture) {
	limit := f.opts.MaxJobSize
	s := schedule("big")
	s.Payload = make([]byte, limit-store.MaxIDLen-len(s.Queue)-len(s.Headers)+1)
	_, err := store.Wait(func(done func(bool, error)) { f.j.PutSchedule(s, done) })
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(limit)) {
		t.Fatalf("put of a schedule whose fires are over the limit: %v; want ErrTooLarge naming %d", err, limit)
	}
	s.Payload = s.Payload[1:]
	f.putSchedule(s)
	if j, _, err := f.fire("big", s.Next, s.Next.Add(s.Every), strings.Repeat("x", store.MaxIDLen)); err != nil || j == nil {
		t.Fatalf("the largest schedule's fire, with the longest msgid: %v", err)
	}
}

// A fire's msgid follows Append's rule: one of a done job whose kept
// result's time is up is free again, even before the sweep.
func fireTakesAnExpiredDoneMsgID(t *testing.T, f *fixture) {
	f.append(job("x", "q"))
	f.complete("x", []byte("r"), time.Now().Add(-time.Second))
	s := schedule("s")
	f.putSchedule(s)
	j, dup, err := f.fire("s", s.Next, s.Next.Add(time.Hour), "x")
	if err != nil || dup || j == nil || f.get("x").State != store.Pending {
		t.Fatalf("fire with an expired done job's msgid: %+v dup %v, %v", j, dup, err)
	}
}
