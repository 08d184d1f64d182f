package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
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
// ["run", {"path": "mathjobs", "callable": "add", "args": [2, 3]}]. The
// handler is called directly here; a worker calls it for each job.
func ExampleCallables() {
	var calls worker.Callables
	calls.Register("mathjobs:add", func(_ context.Context, args []json.RawMessage, _ map[string]json.RawMessage) (any, error) {
		if len(args) != 2 {
			return nil, fmt.Errorf("add takes 2 arguments, got %d", len(args))
		}
		var x, y int
		if err := json.Unmarshal(args[0], &x); err != nil {
			return nil, fmt.Errorf("first argument: %w", err)
		}
		if err := json.Unmarshal(args[1], &y); err != nil {
			return nil, fmt.Errorf("second argument: %w", err)
		}
		return x + y, nil
	})
	handle := calls.Handler() // w.Handle("default", calls.Handler()) in a worker

	for _, payload := range []string{
		`["run", {"path": "mathjobs", "callable": "add", "args": [2, 3]}]`,
		`["run", {"path": "mathjobs", "callable": "add", "args": [2, "three"]}]`,
		`["run", {"path": "mathjobs", "callable": "mul", "args": [2, 3]}]`,
	} {
		reply, err := handle(context.Background(), &worker.Job{Queue: "default", Payload: []byte(payload)})
		if err != nil { // a FAIL: the broker retries the job
			fmt.Println("FAIL:", err)
			continue
		}
		fmt.Println("REPLY:", string(reply))
	}
	// Output:
	// REPLY: 5
	// FAIL: second argument: json: cannot unmarshal string into Go value of type int
	// FAIL: no function registered as mathjobs:mul (registered: mathjobs:add)
}
