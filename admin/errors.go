package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// Errors on the wire are {"error": "a sentence", "code": "a class"},
// with the HTTP status of the class: the caller's mistake (4xx) or the
// broker's trouble (5xx), never one for the other.
var classes = []struct {
	code   string
	status int
	errs   []error // what the class is, to errors.Is; the first is what a Client's error matches
}{
	{"not_done", http.StatusAccepted, []error{ErrNotDone}}, // before not_found: ErrNotDone is one
	{"not_found", http.StatusNotFound, []error{store.ErrNotFound}},
	{"wrong_state", http.StatusConflict, []error{store.ErrWrongState}},
	{"no_keys", http.StatusConflict, []error{store.ErrNoKeys}},
	{"bad_filter", http.StatusBadRequest, []error{store.ErrBadFilter}},
	{"invalid", http.StatusBadRequest, []error{store.ErrInvalidJob}},
	{"too_large", http.StatusBadRequest, []error{store.ErrTooLarge}},
	{"unsupported", http.StatusNotImplemented, []error{errors.ErrUnsupported}},
	{"needs_broker", http.StatusNotImplemented, []error{ErrNeedsBroker}},
	{"unavailable", http.StatusServiceUnavailable, []error{broker.ErrStopped, broker.ErrDraining, store.ErrClosed,
		store.ErrFenced, store.ErrReadOnly, context.DeadlineExceeded, context.Canceled, broker.ErrTooManyListeners}},
}

// classOf is err's code and status; "journal" and 500 for the rest (I/O,
// a damaged record: the journal's trouble).
func classOf(err error) (string, int) {
	for _, c := range classes {
		for _, e := range c.errs {
			if errors.Is(err, e) {
				return c.code, c.status
			}
		}
	}
	return "journal", http.StatusInternalServerError
}

// Error is a refusal of the admin API over HTTP, as a Client returns it.
// errors.Is matches it with the error its code stands for
// (store.ErrNotFound for not_found, and so on), as the other
// implementations' errors match.
type Error struct {
	Status int    // the HTTP status
	Code   string // the class (not_found, wrong_state, ...); "" from an older broker
	Text   string // the API's own words
}

func (e *Error) Error() string { return e.Text }

// Is reports whether e's class is target's.
func (e *Error) Is(target error) bool {
	for _, c := range classes {
		if c.code == e.Code {
			return errors.Is(c.errs[0], target)
		}
	}
	return false
}

type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// fail writes err with the status and code of its class.
func fail(w http.ResponseWriter, err error) {
	code, status := classOf(err)
	writeJSON(w, status, apiError{err.Error(), code})
}

// refuse writes a refusal of the request itself: status with text.
func refuse(w http.ResponseWriter, status int, code, text string) {
	writeJSON(w, status, apiError{text, code})
}

// reply writes v, or err with its class.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
