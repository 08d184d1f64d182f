package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/eventmq/emq/worker"
)

// A handler that reports how far it has come, and stops when the broker
// cancels its job. Called here on a Job made outside a Run, as a
// handler's own tests do: its reports go nowhere.
func ExampleJob_Progress() {
	resize := func(ctx context.Context, job *worker.Job) ([]byte, error) {
		files := strings.Fields(string(job.Payload))
		for i, f := range files {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx) // worker.ErrCancelled after a CANCEL
			}
			job.Progress(100*i/len(files), "resizing "+f) // "50 resizing b.png"
		}
		return []byte(fmt.Sprint("resized ", len(files))), nil
	}
	out, err := resize(context.Background(), &worker.Job{Payload: []byte("a.png b.png")})
	fmt.Println(string(out), err)

	cancelled, cancel := context.WithCancelCause(context.Background())
	cancel(worker.ErrCancelled)
	_, err = resize(cancelled, &worker.Job{Payload: []byte("a.png")})
	fmt.Println(errors.Is(err, worker.ErrCancelled))
	// Output:
	// resized 2 <nil>
	// true
}
