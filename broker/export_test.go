package broker

import "time"

// Hooks for the tests of package broker_test (this file is compiled into
// tests only).

// Replan sets every schedule's deadline again from the schedules' clock:
// a test that moved its clock (Options.Now) calls it, as the loop only
// looks at that clock when it plans.
func Replan(b *Broker) {
	done := make(chan struct{})
	b.post(func() {
		for _, s := range b.scheds {
			b.plan(s)
		}
		close(done)
	})
	<-done
}

// FireID is the msgid of schedule id's fire due at due.
func FireID(id string, due time.Time) string { return fireID(id, due) }
