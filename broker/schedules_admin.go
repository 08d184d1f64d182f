package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// ScheduleInfo describes a schedule the broker keeps.
type ScheduleInfo struct {
	ID       string    `json:"id"`
	Queue    string    `json:"queue"`
	Headers  string    `json:"headers"`
	Every    string    `json:"every,omitempty"` // an interval, as 30s
	Cron     string    `json:"cron,omitempty"`
	Next     time.Time `json:"next,omitzero"`
	LastFire time.Time `json:"last_fire,omitzero"`
	Fires    int       `json:"fires"`
	Left     int       `json:"left"` // fires left; -1 = no end
	Paused   bool      `json:"paused"`
	Created  time.Time `json:"created,omitzero"`

	PayloadSize int    `json:"payload_size"`
	Preview     string `json:"preview"`
	Payload     string `json:"payload_base64,omitempty"` // only when asked for
}

// NewScheduleInfo describes a stored schedule.
func NewScheduleInfo(s *store.Schedule, withPayload bool) ScheduleInfo {
	si := ScheduleInfo{ID: s.ID, Queue: s.Queue, Headers: s.Headers, Cron: s.Cron, Next: s.Next, LastFire: s.LastFire,
		Fires: s.Fires, Left: s.Left, Paused: s.Paused, Created: s.Created, PayloadSize: len(s.Payload),
		Preview: preview(s.Payload)}
	if s.Every > 0 {
		si.Every = s.Every.String()
	}
	if withPayload {
		si.Payload = base64.StdEncoding.EncodeToString(s.Payload)
	}
	return si
}

// SchedulePage is a page of a listing of schedules.
type SchedulePage struct {
	Schedules []ScheduleInfo `json:"schedules"`
	Next      string         `json:"next,omitempty"` // the after of the next page
}

// Schedules lists up to limit schedules (0 = 100) with ids after after, by
// id, as the journal has them.
func (b *Broker) Schedules(after string, limit int) (SchedulePage, error) {
	if !b.running.Load() {
		return SchedulePage{}, ErrStopped
	}
	return ListSchedules(b.journal, after, limit)
}

// ListSchedules lists a journal's schedules, as Schedules does.
func ListSchedules(j store.Journal, after string, limit int) (SchedulePage, error) {
	ss, next, err := j.ListSchedules(after, limit)
	page := SchedulePage{Schedules: make([]ScheduleInfo, 0, len(ss)), Next: next}
	for _, s := range ss {
		page.Schedules = append(page.Schedules, NewScheduleInfo(s, false))
	}
	return page, err
}

// AddSchedule stores a schedule, as a SCHEDULE does (keepSchedule); the
// same schedule as one kept goes on as it was.
func (b *Broker) AddSchedule(ctx context.Context, sp ScheduleSpec) (ScheduleInfo, error) {
	interval, h, payload, err := sp.parts()
	if err != nil {
		return ScheduleInfo{}, err
	}
	result := make(chan error, 1)
	var id string
	var stored *store.Schedule // what was written; nil: nothing was
	err = b.onLoop(ctx, func() {
		b.keepSchedule(sp.Queue, h, interval, sp.Cron, payload, func(i string, ss *store.Schedule, err error) {
			id, stored = i, ss
			result <- err
		})
	})
	if err == nil {
		err = wait(ctx, result)
	}
	if err != nil {
		return ScheduleInfo{}, err
	}
	if stored == nil {
		if stored, err = b.journal.GetSchedule(id); err != nil {
			return ScheduleInfo{}, err
		}
	}
	return NewScheduleInfo(stored, false), nil
}

// RemoveSchedule removes a schedule (an admin's UNSCHEDULE by id).
func (b *Broker) RemoveSchedule(ctx context.Context, id string) error {
	result := make(chan error, 1)
	err := b.onLoop(ctx, func() {
		b.dropSchedule(id, func(found bool, err error) {
			if err == nil && !found {
				err = fmt.Errorf("%w: %s", store.ErrNoSchedule, id)
			}
			result <- err
		})
	})
	if err != nil {
		return err
	}
	return wait(ctx, result)
}

// PauseSchedule pauses (or resumes) a schedule.
func (b *Broker) PauseSchedule(ctx context.Context, id string, paused bool) error {
	result := make(chan error, 1)
	err := b.onLoop(ctx, func() { b.pauseSchedule(id, paused, func(err error) { result <- err }) })
	if err != nil {
		return err
	}
	return wait(ctx, result)
}

// wait waits for an admin change's outcome.
func wait(ctx context.Context, result <-chan error) error {
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ScheduleSpec is a schedule to add through the admin API: Every (a
// duration of whole seconds) or Cron, as a SCHEDULE's frames say.
type ScheduleSpec struct {
	Queue         string `json:"queue"`
	Every         string `json:"every,omitempty"`
	Cron          string `json:"cron,omitempty"`
	Headers       string `json:"headers,omitempty"`
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
}

// Schedule makes the schedule sp describes, due first at now (or, with
// the header nohaste, at its first due time after now). Errors wrap
// store.ErrBadSchedule and say what is wrong.
func (sp ScheduleSpec) Schedule(now time.Time) (*store.Schedule, error) {
	interval, h, payload, err := sp.parts()
	if err != nil {
		return nil, err
	}
	ss, err := makeSchedule(sp.Queue, h, interval, sp.Cron, payload, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrBadSchedule, err)
	}
	return ss, nil
}

// parts reads sp as a SCHEDULE's interval_secs, headers and payload.
func (sp ScheduleSpec) parts() (interval int, h emqp.Headers, payload []byte, err error) {
	bad := func(format string, args ...any) (int, emqp.Headers, []byte, error) {
		return 0, emqp.Headers{}, nil, fmt.Errorf("%w: "+format, append([]any{store.ErrBadSchedule}, args...)...)
	}
	if h, err = emqp.ParseHeaders(sp.Headers); err != nil {
		return bad("%v", err)
	}
	payload = []byte(sp.Payload)
	if sp.PayloadBase64 != "" {
		if payload, err = base64.StdEncoding.DecodeString(sp.PayloadBase64); err != nil {
			return bad("payload_base64: %v", err)
		}
	}
	switch {
	case sp.Every == "" && sp.Cron == "":
		return bad("give every (an interval) or cron (an expression)")
	case sp.Every != "" && sp.Cron != "":
		return bad("give every or cron, not both")
	case sp.Cron != "":
		return emqp.CronInterval, h, payload, nil
	}
	d, err := time.ParseDuration(sp.Every)
	if err != nil || d < time.Second || d%time.Second != 0 {
		return bad("every %q: want whole seconds, at least 1s", sp.Every)
	}
	return int(d / time.Second), h, payload, nil
}

func (b *Broker) scheduleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/schedules", func(w http.ResponseWriter, r *http.Request) {
		limit, ok := pageLimit(w, r.URL.Query())
		if !ok {
			return
		}
		page, err := b.Schedules(r.URL.Query().Get("after"), limit)
		reply(w, page, err)
	})
	mux.HandleFunc("POST /api/v1/schedules", func(w http.ResponseWriter, r *http.Request) {
		var sp ScheduleSpec
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, int64(b.opts.MaxJobSize)*2)).Decode(&sp); err != nil {
			reply(w, nil, fmt.Errorf("%w: the body is not a schedule in JSON: %v", store.ErrBadSchedule, err))
			return
		}
		si, err := b.AddSchedule(r.Context(), sp)
		reply(w, si, err)
	})
	mux.HandleFunc("GET /api/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		s, err := b.journal.GetSchedule(r.PathValue("id"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		withPayload, _ := strconv.ParseBool(r.URL.Query().Get("payload"))
		reply(w, NewScheduleInfo(s, withPayload), nil)
	})
	mux.HandleFunc("DELETE /api/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		err := b.RemoveSchedule(r.Context(), r.PathValue("id"))
		reply(w, map[string]bool{"removed": err == nil}, err)
	})
	for _, action := range []string{"pause", "resume"} {
		mux.HandleFunc("POST /api/v1/schedules/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			err := b.PauseSchedule(r.Context(), r.PathValue("id"), action == "pause")
			reply(w, map[string]bool{"paused": action == "pause" && err == nil}, err)
		})
	}
}
