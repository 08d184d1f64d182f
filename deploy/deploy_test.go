// Package deploy_test checks the monitoring kit beside it against real
// parts: Debian's promtool on the rules, a real broker's /metrics for
// every metric the rules and the Grafana dashboard name, and a real
// prometheus process scraping a real broker on loopback.
package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

const (
	rulesFile = "prometheus/emq-rules.yml"
	rulesTest = "prometheus/emq-rules.test.yml"
	dashboard = "grafana/emq.json"
)

// tool is a binary of Debian's prometheus package, or the test is skipped
// (or, under EMQ_REQUIRE_PROMETHEUS, fails).
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_PROMETHEUS", "%s is not installed (apt-get install -y prometheus)", name)
	}
	return path
}

// The rules load, and each alert fires on series shaped like a broker's
// when it should, and not before (promtool test rules).
func TestRulesPassPromtool(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", filepath.Base(rulesTest)}} {
		cmd := exec.Command(promtool, args...)
		if args[0] == "test" {
			cmd.Dir = filepath.Dir(rulesTest)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// metricName is a metric a PromQL expression names (recording rules'
// names have a colon and are left out).
var metricName = regexp.MustCompile(`\bemq_[a-z_]+`)

// kitMetrics returns every metric the rules and the dashboard name.
func kitMetrics(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metricName.FindAllString(string(rules), -1) {
		names[m] = append(names[m], rulesFile)
	}
	raw, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", dashboard)
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboard, p.Title)
		}
		for _, q := range p.Targets {
			for _, m := range metricName.FindAllString(q.Expr, -1) {
				names[m] = append(names[m], dashboard+" "+p.Title)
			}
		}
	}
	return names
}

// kitBroker is a broker with its admin listener, in a group (so that the
// group's metrics are served), holding a pending job.
func kitBroker(t *testing.T) *bt.Broker {
	t.Helper()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { o.ResultTTL = time.Hour }, func(o *admin.Options) {
		o.Group = func() admin.GroupInfo {
			return admin.GroupInfo{Info: group.Info{Role: group.RoleLeader, Name: "a", Leader: "a", Elections: 1}}
		}
	})
	client := bt.Dial(t, b.Frontend(), "c")
	client.Request("email", "", []byte("x"))
	return b
}

// Every metric the rules and the dashboard name is one a broker serves:
// renaming one fails here, not in an operator's silent dashboard.
func TestKitNamesOnlyServedMetrics(t *testing.T) {
	t.Parallel()
	b := kitBroker(t)
	resp, err := http.Get("http://" + b.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		served[name] = true
	}
	names := kitMetrics(t)
	if len(names) < 15 {
		t.Fatalf("the kit names %d metrics: %v", len(names), names)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		if !served[name] {
			t.Errorf("%s names %s, which the broker does not serve", strings.Join(slices.Compact(names[name]), ", "), name)
		}
	}
}

// A real prometheus scrapes a real broker with the rules loaded: its
// query API returns the broker's series and a recording rule's, and the
// rules are healthy.
func TestPrometheusScrapesABroker(t *testing.T) {
	t.Parallel()
	prom := tool(t, "prometheus")
	b := kitBroker(t)
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: emq
    static_configs:
      - targets: [%q]
`, rules, b.AdminAddr())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	web := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	testutil.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})

	type result struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`
	}
	query := func(q string) []result {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var out struct {
			Status string
			Data   struct{ Result []result }
		}
		if json.NewDecoder(resp.Body).Decode(&out) != nil || out.Status != "success" {
			return nil
		}
		return out.Data.Result
	}
	testutil.EventuallyWithin(t, time.Minute, "prometheus holding the broker's job counts", func() bool {
		r := query(`emq_jobs_acked_total{job="emq"}`)
		return len(r) == 1 && len(r[0].Value) == 2 && r[0].Value[1] == "1"
	})
	if r := query(`emq_queue_pending_jobs{queue="email"}`); len(r) != 1 || r[0].Value[1] != "1" {
		t.Errorf("emq_queue_pending_jobs of email: %+v", r)
	}
	if r := query(`emq_ready`); len(r) != 1 || r[0].Value[1] != "1" {
		t.Errorf("emq_ready: %+v", r)
	}
	testutil.EventuallyWithin(t, time.Minute, "a recording rule's series", func() bool {
		return len(query(`emq:jobs_acked:rate1m`)) == 1
	})
	resp, err := http.Get("http://" + web + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rs struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct{ Name, Health, LastError string }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rs.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" {
				t.Errorf("rule %s of %s: %s", r.Name, g.Name, r.LastError)
			}
		}
	}
	if n != 17 {
		t.Errorf("prometheus loaded %d rules; want the 17 of %s", n, rulesFile)
	}
}
