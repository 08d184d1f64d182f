package broker

import (
	"testing"
	"time"
)

// Cron schedules in a time zone across its daylight saving changes fire
// once a local day, as classic cron does: the repeated hour of autumn
// does not fire a daily schedule twice, the skipped hour of spring does
// not drop it (it comes at the same time on the old clock). A schedule
// every hour fires every real hour through both.
func TestCronAcrossDaylightSavingChanges(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	fires := func(expr string, from, to time.Time) []time.Time {
		c, err := parseCadence(-1, expr, "Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Time
		for due := c.first(from, true); due.Before(to); due = c.after(due, due) {
			out = append(out, due)
		}
		return out
	}
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     []string // in Berlin's time
	}{
		{"spring", time.Date(2025, 3, 29, 0, 0, 0, 0, berlin), time.Date(2025, 4, 1, 0, 0, 0, 0, berlin),
			[]string{"2025-03-29 02:30 CET", "2025-03-30 03:30 CEST", "2025-03-31 02:30 CEST"}},
		{"autumn", time.Date(2025, 10, 25, 0, 0, 0, 0, berlin), time.Date(2025, 10, 28, 0, 0, 0, 0, berlin),
			[]string{"2025-10-25 02:30 CEST", "2025-10-26 02:30 CEST", "2025-10-27 02:30 CET"}},
	} {
		var got []string
		for _, f := range fires("30 2 * * *", c.from, c.to) {
			got = append(got, f.In(berlin).Format("2006-01-02 15:04 MST"))
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: 30 2 * * * fired at %v, want %v", c.name, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%s: 30 2 * * * fired at %v, want %v", c.name, got, c.want)
			}
		}
		hourly := fires("0 * * * *", c.from, c.to)
		for i := 1; i < len(hourly); i++ {
			if d := hourly[i].Sub(hourly[i-1]); d != time.Hour {
				t.Fatalf("%s: hourly fires %v apart at %v", c.name, d, hourly[i])
			}
		}
	}
}
