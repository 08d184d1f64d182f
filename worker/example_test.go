package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"

	"github.com/eventmq/emq/worker"
)

// A worker serving two queues, four jobs at a time, until Ctrl-C.
func Example() {
	w, err := worker.New(worker.Options{
		Broker:      "tcp://127.0.0.1:47291",
		Queues:      []worker.Queue{{Name: "email", Weight: 20}, {Name: "resize", Weight: 10}},
		Concurrency: 4,
	})
	if err != nil {
		panic(err)
	}
	w.Handle("email", func(ctx context.Context, job *worker.Job) ([]byte, error) {
		// ctx ends at the job's timeout; an error is a FAIL, retried.
		return nil, nil
	})
	w.Handle("resize", func(ctx context.Context, job *worker.Job) ([]byte, error) {
		return []byte("resized " + string(job.Payload)), nil
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil { // returns after a graceful stop
		panic(err)
	}
}

// Go functions for the payloads an EventMQ (Python) client sends:
// ["run", {"path": "mathjobs", "callable": "add", "args": [2, 3]}].
func ExampleCallables() {
	var calls worker.Callables
	calls.Register("mathjobs:add", func(_ context.Context, args []json.RawMessage, _ map[string]json.RawMessage) (any, error) {
		var x, y int
		json.Unmarshal(args[0], &x)
		json.Unmarshal(args[1], &y)
		return x + y, nil
	})
	w, err := worker.New(worker.Options{Broker: "tcp://127.0.0.1:47291"})
	if err != nil {
		panic(err)
	}
	w.Handle("default", calls.Handler())
}
