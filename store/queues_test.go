package store

import (
	"encoding/json"
	"testing"
)

// A queue's controls stored before the tenant defaults existed read as
// they were, and controls without tenant defaults are stored as before:
// an older binary reads them the same.
func TestQueueSettingsReadAsBefore(t *testing.T) {
	old := `{"paused":true,"concurrency":4,"rate":2.5,"burst":10}`
	var s QueueSettings
	if err := json.Unmarshal([]byte(old), &s); err != nil {
		t.Fatal(err)
	}
	if want := (QueueSettings{Paused: true, Concurrency: 4, Rate: 2.5, Burst: 10}); s != want {
		t.Fatalf("read %+v, want %+v", s, want)
	}
	if b, _ := json.Marshal(s); string(b) != old {
		t.Fatalf("stored as %s, want %s", b, old)
	}
}
