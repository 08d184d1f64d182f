package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/worker"
)

// A job after two others reads their results through the admin API
// (retain-done keeps them); the original EventMQ frames of its REQUEST
// are those of any job.
func TestParentResults(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fast(o); o.ResultTTL = time.Hour }, nil)
	api, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr()})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b.Frontend())
	got := make(chan map[string][]byte, 1)
	startWorker(t, b.Backend(), worker.Options{Concurrency: 2}, map[string]worker.Handler{
		"parts": func(_ context.Context, job *worker.Job) ([]byte, error) { return job.Payload, nil },
		"sum": func(ctx context.Context, job *worker.Job) ([]byte, error) {
			results, err := worker.ParentResults(ctx, api, job)
			if err != nil {
				return nil, err
			}
			got <- results
			return nil, nil
		},
	})
	ctx := ctxWait(t)
	a, err := c.Send(ctx, "parts", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	bb, err := c.Send(ctx, "parts", []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "sum", nil, client.After(a, bb)); err != nil {
		t.Fatal(err)
	}
	results := <-got
	if string(results[a]) != "a" || string(results[bb]) != "b" {
		t.Fatalf("parents' results %q", results)
	}
}
