package worker

import (
	"context"
	"fmt"
)

// Parents returns the msgids of the jobs the job waited for (header
// after), in the order they were given; none for a job that waited for
// nothing.
func (j *Job) Parents() []string {
	wf, err := j.Headers.Workflow()
	if err != nil {
		return nil
	}
	return wf.After
}

// ResultReader reads a job's kept result; package admin's Client (over
// the broker's admin API) is one.
type ResultReader interface {
	Result(ctx context.Context, msgid string) ([]byte, error)
}

// ParentResults reads the results of the jobs job waited for, by
// msgid, through r. A broker keeps results only with --retain-done; a
// parent whose result is not kept is an error naming it.
func ParentResults(ctx context.Context, r ResultReader, job *Job) (map[string][]byte, error) {
	out := make(map[string][]byte)
	for _, id := range job.Parents() {
		res, err := r.Result(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("worker: the result of job %s, which job %s waited for: %w", id, job.MsgID, err)
		}
		out[id] = res
	}
	return out, nil
}
