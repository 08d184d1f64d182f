package admin

import (
	"encoding/base64"
	"fmt"
	"time"

	"github.com/eventmq/emq/broker"
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
	// PayloadHidden: the caller may not see payloads (payloads.go), so
	// Preview is empty and Payload absent.
	PayloadHidden bool `json:"payload_hidden,omitempty"`
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

// schedulePage is a page of a journal's schedules and the after of the
// next one.
func schedulePage(ss []*store.Schedule, next string, err error) (SchedulePage, error) {
	page := SchedulePage{Schedules: make([]ScheduleInfo, 0, len(ss)), Next: next}
	for _, s := range ss {
		page.Schedules = append(page.Schedules, NewScheduleInfo(s, false))
	}
	return page, err
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
// the header nohaste, at its first due time after now), as the broker
// makes a SCHEDULE's. Errors wrap store.ErrBadSchedule and say what is
// wrong.
func (sp ScheduleSpec) Schedule(now time.Time) (*store.Schedule, error) {
	interval, h, payload, err := sp.parts()
	if err != nil {
		return nil, err
	}
	ss, err := broker.MakeSchedule(sp.Queue, h, interval, sp.Cron, payload, now)
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
