package worker_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/worker"
)

// A handler's reports reach the broker as PROGRESS for its job: the first
// at once, then at most 10 a second however fast they are made, the
// latest always, and none after the job's REPLY.
func TestProgress(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	release, afterReturn, lateDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": func(ctx context.Context, j *worker.Job) ([]byte, error) {
			start := time.Now()
			for i := 0; time.Since(start) < 300*time.Millisecond; i++ {
				j.Progress(i%100, fmt.Sprint("step ", i))
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
			j.Progress(100, "last of the burst")
			<-release
			j.Progress(50, "just before the REPLY") // goes before it, or not at all
			go func() {
				<-afterReturn
				j.Progress(60, "after the REPLY") // goes nowhere
				close(lateDone)
			}()
			return []byte("done"), nil
		},
	})
	id := fb.Accept()
	expect[*emqp.Ready](fb)

	job := emqp.NewID()
	sent := time.Now()
	fb.Send(id, &emqp.Request{MsgID: job, Queue: "q"})
	var texts []string
	for len(texts) == 0 || texts[len(texts)-1] != "100 last of the burst" {
		p := expect[*emqp.Progress](fb)
		if p.OrigMsgID != job {
			t.Fatalf("PROGRESS for %q, want the job's msgid %s", p.OrigMsgID, job)
		}
		texts = append(texts, p.Text)
	}
	elapsed := time.Since(sent)
	if texts[0] != "0 step 0" {
		t.Errorf("first PROGRESS %q, want the first report at once", texts[0])
	}
	// n reports with 100 ms between them span (n-1)*100 ms, all within
	// what the test saw.
	if bound := 1 + int(elapsed/(100*time.Millisecond)); len(texts) > bound {
		t.Errorf("%d PROGRESS in %v, more than 10 a second: %q", len(texts), elapsed, texts)
	}
	t.Logf("%d PROGRESS in %v: %q", len(texts), elapsed, texts)

	close(release)
	for done := false; !done; {
		switch m := fb.Next().msg.(type) {
		case *emqp.Progress:
			if m.Text != "50 just before the REPLY" {
				t.Errorf("PROGRESS %q before the REPLY, want only the one made just before it", m.Text)
			}
		case *emqp.Reply:
			if m.OrigMsgID != job || string(m.Payload) != "done" {
				t.Fatalf("REPLY %+v", m)
			}
			done = true
		default:
			t.Fatalf("got %s %+v, want PROGRESS or the REPLY", m.Command(), m)
		}
	}
	expect[*emqp.Ready](fb)
	close(afterReturn)
	receive(t, "the report after the REPLY made", lateDone)
	// Past every turn a waiting report could have had (100 ms), and past
	// the one made after the REPLY.
	fb.WaitBeats(4)
	select {
	case p := <-fb.in:
		t.Fatalf("after the REPLY and READY the broker got %s %+v", p.msg.Command(), p.msg)
	default:
	}
}

// Reports are cut to emqp.MaxProgressLen on a UTF-8 boundary, a percent
// above 100 counts as 100, and an empty report is not sent.
func TestProgressText(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	next := make(chan struct{})
	long := "a" + strings.Repeat("é", 600) // 1201 bytes
	reports := []struct {
		percent int
		note    string
		want    string
	}{
		{40, "resizing", "40 resizing"},
		{-1, "", ""}, // not sent: the next one comes first
		{-1, "copying", "copying"},
		{250, "", "100"},
		{-1, "bad \xff byte", "bad \uFFFD byte"},
		{-1, long, long[:1023]},
	}
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": func(ctx context.Context, j *worker.Job) ([]byte, error) {
			for _, r := range reports {
				<-next
				j.Progress(r.percent, r.note)
			}
			<-next // the last has arrived: it did not wait for its turn at the return
			return nil, nil
		},
	})
	id := fb.Accept()
	expect[*emqp.Ready](fb)
	fb.Send(id, &emqp.Request{MsgID: emqp.NewID(), Queue: "q"})
	for _, r := range reports {
		next <- struct{}{}
		if r.want == "" {
			continue
		}
		p := expect[*emqp.Progress](fb)
		if p.Text != r.want {
			t.Errorf("Progress(%d, %.20q...) sent %.40q (%d bytes), want %.40q (%d bytes)", r.percent, r.note, p.Text, len(p.Text), r.want, len(r.want))
		}
		if len(p.Text) > emqp.MaxProgressLen || !utf8.ValidString(p.Text) {
			t.Errorf("PROGRESS text of %d bytes, valid UTF-8 %v", len(p.Text), utf8.ValidString(p.Text))
		}
	}
	next <- struct{}{}
	expect[*emqp.Reply](fb)
}

// A Job made by a test, outside a Run, takes reports and sends nothing.
func TestProgressOfAJobOutsideARun(t *testing.T) {
	var j worker.Job
	j.Progress(50, "half")
	var none *worker.Job
	none.Progress(50, "half")
}
