// Package jaegertest runs a real Jaeger (v2, memory storage) on loopback
// for tests that read EMQ's traces back through its query API.
//
// The binary is built from Jaeger's Go module, pinned in tool/go.mod
// (make jaeger: bin/jaeger); EMQ_JAEGER may name another. Without it a
// test is skipped, or fails under EMQ_REQUIRE_JAEGER (CI sets it).
package jaegertest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
)

// Jaeger is a running Jaeger.
type Jaeger struct {
	OTLPGRPC string // host:port of its OTLP gRPC receiver
	OTLPHTTP string // host:port of its OTLP HTTP receiver
	Query    string // host:port of its query API and UI
	cmd      *exec.Cmd
	logs     *buffer
}

// Binary returns the path of the Jaeger binary, or "" when there is none.
func Binary() string {
	if p := os.Getenv("EMQ_JAEGER"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "bin", "jaeger")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// ConfigFile is Jaeger's configuration, its addresses from the
// environment (JAEGER_OTLP_GRPC, JAEGER_OTLP_HTTP, JAEGER_QUERY_HTTP,
// JAEGER_QUERY_GRPC, JAEGER_UI_ASSETS); make trace-demo uses it too.
func ConfigFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "jaeger.yaml")
}

// Start runs Jaeger on free loopback ports until the test ends, and
// returns once its query API answers. uiDir, if not "", holds Jaeger UI's
// built assets to serve (the binary built from the Go module has none).
func Start(t testing.TB, uiDir string) *Jaeger {
	t.Helper()
	bin := Binary()
	if bin == "" {
		testutil.Missing(t, "EMQ_REQUIRE_JAEGER", "no Jaeger binary: run make jaeger (bin/jaeger), or set EMQ_JAEGER")
	}
	j := &Jaeger{OTLPGRPC: freePort(t), OTLPHTTP: freePort(t), Query: freePort(t), logs: &buffer{}}
	j.cmd = exec.Command(bin, "--config", "file:"+ConfigFile())
	j.cmd.Env = append(os.Environ(), "JAEGER_OTLP_GRPC="+j.OTLPGRPC, "JAEGER_OTLP_HTTP="+j.OTLPHTTP,
		"JAEGER_QUERY_HTTP="+j.Query, "JAEGER_QUERY_GRPC="+freePort(t), "JAEGER_UI_ASSETS="+uiDir)
	j.cmd.Stdout, j.cmd.Stderr = j.logs, j.logs
	testutil.DieWithParent(j.cmd)
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- j.cmd.Wait() }()
	t.Cleanup(func() {
		j.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("jaeger's log:\n%s", j.logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get("http://" + j.Query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited: %v\n%s", err, j.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API did not answer within 30 s\n%s", j.logs.String())
		}
	}
}

// Env is what a process needs to export its spans to this Jaeger (OTLP
// over HTTP), at once rather than in 5 s batches.
func (j *Jaeger) Env(service string) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + j.OTLPHTTP,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=" + service,
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// Span is a span as Jaeger's query API gives it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"` // CHILD_OF, FOLLOWS_FROM
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs
	Duration  int64 `json:"duration"`  // µs
	Tags      []Tag `json:"tags"`
	Logs      []struct {
		Fields []Tag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
	Service   string `json:"-"` // filled from the trace's processes
}

// Tag is a span's attribute, or a field of one of its events.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Tag returns the value of the span's tag key, as text ("" when absent).
func (s Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Events returns the names of the span's events (Jaeger's logs).
func (s Span) Events() []string {
	var names []string
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" {
				names = append(names, fmt.Sprint(f.Value))
			}
		}
	}
	return names
}

// Parent returns the span id the span is a child of ("" for a root).
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Trace returns the spans Jaeger holds of the trace traceID (hex), none
// when it holds nothing of it (yet).
func (j *Jaeger) Trace(t testing.TB, traceID string) []Span {
	t.Helper()
	resp, err := http.Get("http://" + j.Query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatalf("jaeger's query API: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Data []struct {
			Spans     []Span `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("jaeger's answer for trace %s: %v", traceID, err)
	}
	var spans []Span
	for _, d := range body.Data {
		for _, s := range d.Spans {
			s.Service = d.Processes[s.ProcessID].ServiceName
			spans = append(spans, s)
		}
	}
	return spans
}

// WaitTrace returns the trace's spans once done says they are all
// there; it fails the test when they are not within 20 s.
func (j *Jaeger) WaitTrace(t testing.TB, traceID string, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans := j.Trace(t, traceID)
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, s.Service+": "+s.OperationName)
			}
			t.Fatalf("jaeger's trace %s after 20 s: %d spans %q", traceID, len(spans), names)
		}
		time.Sleep(50 * time.Millisecond) // a poll with a deadline: the spans arrive in batches
	}
}

// UIURL is the address of the trace's page in Jaeger's UI.
func (j *Jaeger) UIURL(traceID string) string { return "http://" + j.Query + "/trace/" + traceID }

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
