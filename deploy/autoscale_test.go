package deploy_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
)

const (
	kedaFile    = "keda/scaledobject.yaml"
	adapterFile = "hpa/prometheus-adapter.yaml"
	hpaFile     = "hpa/hpa.yaml"
)

// keys are the keys the examples are read by, as KEDA, the adapter and
// Kubernetes spell them: viper reads keys in lower case, so each must be
// in its file spelled so.
var keys = map[string][]string{
	kedaFile:    {"kind:", "secretTargetRef:", "parameter:", "triggers:", "authenticationRef:", "authMode:", "url:", "valueLocation:"},
	adapterFile: {"externalRules:", "seriesQuery:", "name:", "as:", "metricsQuery:"},
	hpaFile:     {"metrics:", "external:", "metric:", "selector:", "matchLabels:"},
}

// yamlDocs reads each document of a YAML file (--- between them), its
// keys in lower case.
func yamlDocs(t *testing.T, file string) []*viper.Viper {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[file] {
		found := regexp.MustCompile(`(?mi)^[ -]*(`+regexp.QuoteMeta(k)+`)`).FindAllSubmatch(raw, -1)
		if len(found) == 0 {
			t.Errorf("%s: no key %s", file, k)
		}
		for _, f := range found {
			if string(f[1]) != k {
				t.Errorf("%s: %s is spelled %s", file, f[1], k)
			}
		}
	}
	var docs []*viper.Viper
	for _, text := range regexp.MustCompile(`(?m)^---$`).Split(string(raw), -1) {
		v := viper.New()
		v.SetConfigType("yaml")
		if err := v.ReadConfig(strings.NewReader(text)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		docs = append(docs, v)
	}
	return docs
}

// list is the YAML list at key of v, as maps.
func list(t *testing.T, v *viper.Viper, key string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range v.Get(key).([]any) {
		m, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("%s: an item that is not a map: %v", key, e)
		}
		out = append(out, m)
	}
	return out
}

// jsonPath follows a GJSON path of plain names (a.b.c) in a JSON value.
func jsonPath(v any, path string) (any, bool) {
	for _, name := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[name]; !ok {
			return nil, false
		}
	}
	return v, true
}

// Every field KEDA's metrics-api triggers read is served: each trigger's
// URL, asked of a real broker with the read-only token as KEDA sends it,
// answers 200 with a number at its valueLocation, for a queue with jobs
// and for one the broker does not know (scaled to zero, idle).
func TestKEDAReadsServedFields(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", nil, func(o *admin.Options) { o.Token, o.ReadToken = "full", "read" })
	client := bt.Dial(t, b.Frontend(), "c")
	client.Request("email", "", []byte("x"))

	var triggers []map[string]any
	auth := map[string]bool{} // TriggerAuthentications giving a token
	for _, doc := range yamlDocs(t, kedaFile) {
		switch doc.GetString("kind") {
		case "ScaledObject":
			triggers = append(triggers, list(t, doc, "spec.triggers")...)
		case "TriggerAuthentication":
			for _, ref := range list(t, doc, "spec.secrettargetref") {
				if ref["parameter"] == "token" {
					auth[doc.GetString("metadata.name")] = true
				}
			}
		}
	}
	if len(triggers) < 2 {
		t.Fatalf("%s: %d triggers", kedaFile, len(triggers))
	}
	for i, tr := range triggers {
		meta, _ := tr["metadata"].(map[string]any)
		authRef, _ := tr["authenticationref"].(map[string]any)
		if tr["type"] != "metrics-api" || meta["authmode"] != "bearer" || !auth[authRef["name"].(string)] {
			t.Errorf("%s: trigger %d: want a metrics-api trigger with bearer auth from a TriggerAuthentication's token: %v", kedaFile, i, tr)
			continue
		}
		u, err := url.Parse(meta["url"].(string))
		if err != nil {
			t.Fatalf("%s: trigger %d: %v", kedaFile, i, err)
		}
		location := meta["valuelocation"].(string)
		idle := strings.Replace(u.RequestURI(), "/email", "/a-queue-nobody-uses", 1)
		for _, path := range []string{u.RequestURI(), idle} {
			req, _ := http.NewRequest("GET", "http://"+b.AdminAddr()+path, nil)
			req.Header.Set("Authorization", "Bearer read")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil {
				t.Errorf("%s: trigger %d: GET %s: %s (%v)", kedaFile, i, path, resp.Status, err)
				continue
			}
			if x, ok := jsonPath(v, location); !ok {
				t.Errorf("%s: trigger %d: GET %s has no %s: %v", kedaFile, i, path, location, v)
			} else if _, ok := x.(float64); !ok {
				t.Errorf("%s: trigger %d: GET %s: %s is %v, not a number", kedaFile, i, path, location, x)
			}
		}
	}
}

// Every metric the Prometheus adapter's rules read is one a broker
// exports, with the queue label the HPA selects by, and every external
// metric the HPA asks for is one the rules make.
func TestHPAReadsServedMetrics(t *testing.T) {
	t.Parallel()
	b := kitBroker(t) // a pending job in queue email
	families := bt.ScrapeMetrics(t, b)
	made := map[string]bool{}
	rules := list(t, yamlDocs(t, adapterFile)[0], "externalrules")
	if len(rules) == 0 {
		t.Fatalf("%s: no externalRules", adapterFile)
	}
	for _, r := range rules {
		query, _ := r["seriesquery"].(string)
		name := metricName.FindString(query)
		mf := families[name]
		if mf == nil {
			t.Errorf("%s: %q reads %q, which the broker does not export", adapterFile, query, name)
			continue
		}
		labelled := false
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labelled = labelled || l.GetName() == "queue" && l.GetValue() == "email"
			}
		}
		if !labelled {
			t.Errorf("%s: %s has no series of queue email: %v", adapterFile, name, mf)
		}
		as, _ := r["name"].(map[string]any)["as"].(string)
		made[as] = true
	}
	hpa := yamlDocs(t, hpaFile)[0]
	metrics := list(t, hpa, "spec.metrics")
	if len(metrics) == 0 {
		t.Fatalf("%s: no metrics", hpaFile)
	}
	for _, m := range metrics {
		ext, _ := m["external"].(map[string]any)
		metric, _ := ext["metric"].(map[string]any)
		name, _ := metric["name"].(string)
		if !made[name] {
			t.Errorf("%s: the external metric %q is not one %s makes (%v)", hpaFile, name, adapterFile, made)
		}
		sel, _ := metric["selector"].(map[string]any)["matchlabels"].(map[string]any)
		if _, ok := sel["queue"]; !ok || len(sel) != 1 {
			t.Errorf("%s: %s: select by the queue label alone: %v", hpaFile, name, sel)
		}
	}
}
