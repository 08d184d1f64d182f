package brokertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Fast makes a broker's heartbeats and retries quick, for tests that
// lose workers or retry jobs.
func Fast(o *broker.Options) {
	o.HeartbeatInterval = 50 * time.Millisecond
	o.HeartbeatTimeout = 500 * time.Millisecond
	o.RetryBackoff = 10 * time.Millisecond
}

// Token sets the admin listener's token (StartAdmin's editAdmin).
func Token(token string) func(*admin.Options) {
	return func(o *admin.Options) { o.Token = token }
}

// API calls b's admin API as a program does (with the admin header and,
// if not "", the token) and decodes a 200's JSON answer into out (if not
// nil). It returns the status.
func API(t testing.TB, b *Broker, method, path, token string, out any) int {
	t.Helper()
	return APIAt(t, b.AdminAddr(), method, path, token, out)
}

// APIAt is API on the admin listener at addr.
func APIAt(t testing.TB, addr, method, path, token string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(admin.Header, "test") // as a program does
	resp, err := (&http.Client{Timeout: Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, body)
		}
	}
	return resp.StatusCode
}

// Post posts body as JSON to b's admin API and returns the status and
// the answer.
func Post(t testing.TB, b *Broker, path string, body any) (int, string) {
	t.Helper()
	js, _ := json.Marshal(body)
	resp, err := (&http.Client{Timeout: Wait}).Post("http://"+b.AdminAddr()+path, "application/json", bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(text)
}

// Request sends a request with no body to b's admin API with the token
// (if not ""), Host host (if not "") and headers, and returns the status.
func Request(t testing.TB, b *Broker, method, path, token, host string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+b.AdminAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ScrapeMetrics reads b's /metrics.
func ScrapeMetrics(t testing.TB, b *Broker) map[string]*dto.MetricFamily {
	t.Helper()
	return ScrapeMetricsAs(t, b, "")
}

// ScrapeMetricsAs reads b's /metrics with token (if not "").
func ScrapeMetricsAs(t testing.TB, b *Broker, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+b.AdminAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// MetricValue is one metric's value (of the series whose first label is
// label, when given).
func MetricValue(t testing.TB, mf map[string]*dto.MetricFamily, name, label string) float64 {
	t.Helper()
	f := mf[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
	for _, m := range f.Metric {
		if label != "" && (len(m.Label) == 0 || m.Label[0].GetValue() != label) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("%s{%s} not found", name, label)
	return 0
}

// TrailKinds writes a trail's kinds in one line, with the attempt of a
// dispatch: "received dispatched#1 failed".
func TrailKinds(trail []store.TrailEvent) string {
	var kinds []string
	for _, e := range trail {
		k := e.Kind
		if e.Attempt > 0 {
			k += fmt.Sprint("#", e.Attempt)
		}
		kinds = append(kinds, k)
	}
	return strings.Join(kinds, " ")
}

// InformScheduler makes p an EventMQ scheduler (INFORM with peer type
// scheduler) and waits for its ACK.
func (p *Peer) InformScheduler() {
	p.t.Helper()
	id := emqp.NewID()
	p.SendFrames([]byte(""), []byte("eMQP/1.0"), []byte("INFORM"), []byte(id), []byte(""), []byte("scheduler"))
	if ack := Expect[*emqp.Ack](p); ack.AckedID != id {
		p.t.Fatalf("ACK for %s, want the INFORM's %s", ack.AckedID, id)
	}
}

// QueueInfo is what the broker says of one queue; it fails the test
// when the broker knows no such queue.
func QueueInfo(t testing.TB, b *Broker, name string) broker.QueueInfo {
	t.Helper()
	qs, err := b.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("no queue %s in %+v", name, qs)
	return broker.QueueInfo{}
}
