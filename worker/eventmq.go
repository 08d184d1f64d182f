package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Callable is a Go function that EventMQ "run" payloads can call. args and
// kwargs are the payload's JSON values, to unmarshal as the function needs;
// the result is marshalled to JSON as the REPLY's payload.
type Callable func(ctx context.Context, args []json.RawMessage, kwargs map[string]json.RawMessage) (any, error)

// Callables routes EventMQ payloads,
//
//	["run", {"path": "jobs.email", "callable": "send", "args": [...], "kwargs": {...}}]
//
// to Go functions registered as "jobs.email:send" (or "jobs.email.send"),
// so that a Python EventMQ client can enqueue jobs for Go workers.
type Callables struct {
	fns map[string]Callable
}

// Register makes fn callable as name, "path:callable" or "path.callable".
func (c *Callables) Register(name string, fn Callable) {
	if c.fns == nil {
		c.fns = make(map[string]Callable)
	}
	c.fns[name] = fn
}

// Handler returns a Handler that runs the registered function a payload
// names. A payload that is not a "run" message, or names no registered
// function, FAILs with a reason that says so.
func (c *Callables) Handler() Handler {
	return func(ctx context.Context, job *Job) ([]byte, error) {
		var msg []json.RawMessage
		if err := json.Unmarshal(job.Payload, &msg); err != nil || len(msg) != 2 {
			return nil, fmt.Errorf(`payload is not an EventMQ ["run", {...}] message`)
		}
		var verb string
		if err := json.Unmarshal(msg[0], &verb); err != nil || verb != "run" {
			return nil, fmt.Errorf(`payload's first item is %s, want "run"`, msg[0])
		}
		var call struct {
			Path     string                     `json:"path"`
			Callable string                     `json:"callable"`
			Args     []json.RawMessage          `json:"args"`
			Kwargs   map[string]json.RawMessage `json:"kwargs"`
		}
		if err := json.Unmarshal(msg[1], &call); err != nil {
			return nil, fmt.Errorf("payload's run object: %w", err)
		}
		fn := c.fns[call.Path+":"+call.Callable]
		if fn == nil {
			fn = c.fns[call.Path+"."+call.Callable]
		}
		if fn == nil {
			return nil, fmt.Errorf("no function registered as %s:%s (registered: %s)", call.Path, call.Callable, c.names())
		}
		out, err := fn(ctx, call.Args, call.Kwargs)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

func (c *Callables) names() string {
	names := make([]string, 0, len(c.fns))
	for n := range c.fns {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
