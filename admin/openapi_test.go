package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/shards"
	"github.com/eventmq/emq/store"
)

// The OpenAPI document (openapi.json) against what the admin listener
// serves: its routes, its Go types' JSON, and a running broker's answers.

// spec is the part of an OpenAPI document the tests read.
type spec struct {
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas   map[string]*schema         `json:"schemas"`
		Responses map[string]*response       `json:"responses"`
		Params    map[string]json.RawMessage `json:"parameters"`
	} `json:"components"`
}

type operation struct {
	Responses map[string]*response `json:"responses"`
}

type response struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema *schema `json:"schema"`
	} `json:"content"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 json.RawMessage    `json:"type"` // a name or a list of names
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	AllOf                []*schema          `json:"allOf"`
	OneOf                []*schema          `json:"oneOf"`
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	var s spec
	dec := json.NewDecoder(bytes.NewReader(admin.OpenAPI))
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return &s
}

// types are the JSON type names a schema allows.
func (sc *schema) types() []string {
	if len(sc.Type) == 0 {
		var any []string
		for _, o := range sc.OneOf {
			any = append(any, o.types()...)
		}
		return any
	}
	var one string
	if json.Unmarshal(sc.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(sc.Type, &many)
	return many
}

// resolve follows $ref and merges allOf into one object schema.
func (s *spec) resolve(sc *schema) *schema {
	for sc.Ref != "" {
		sc = s.Components.Schemas[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
	}
	if len(sc.AllOf) == 0 {
		return sc
	}
	out := &schema{Type: json.RawMessage(`"object"`), Properties: map[string]*schema{}}
	for _, part := range sc.AllOf {
		p := s.resolve(part)
		for k, v := range p.Properties {
			out.Properties[k] = v
		}
		out.Required = append(out.Required, p.Required...)
	}
	return out
}

func (s *spec) response(r *response) *response {
	for r.Ref != "" {
		r = s.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")]
	}
	return r
}

// A route is a method and a path as the mux takes them; method "" is
// every method (a pattern without one).
type route struct{ method, path string }

func (r route) String() string { return strings.TrimSpace(r.method + " " + r.path) }

// servedRoutes reads the routes the admin handler serves from this
// package's mux.HandleFunc and mux.Handle calls: a pattern is a string
// literal, or a literal joined to the variable of a loop over a literal
// list or map. Any other pattern, or a HandleFunc not called, fails the
// test by file and line: the drift test could not see its route.
func servedRoutes(t *testing.T) []route {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var routes []route
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var stack []ast.Node
		calls := map[*ast.SelectorExpr]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle" || len(n.Args) != 2 {
					return true
				}
				calls[sel] = true
				patterns, ok := patternValues(n.Args[0], stack)
				if !ok {
					t.Errorf("%s: a route pattern the drift test cannot read: write it as a literal, or a literal joined to a loop variable over a literal list", fset.Position(n.Pos()))
				}
				for _, p := range patterns {
					method, path, found := strings.Cut(p, " ")
					if !found {
						method, path = "", p
					}
					routes = append(routes, route{method, path})
				}
			case *ast.SelectorExpr:
				if (n.Sel.Name == "HandleFunc" || n.Sel.Name == "Handle") && !calls[n] {
					// Inspect visits a call before its Fun: a selector
					// not marked is not called where it is named.
					t.Errorf("%s: %s used other than as a call: the drift test cannot see the routes it adds", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
	return routes
}

// patternValues is the string values of e, a route pattern; stack is
// the path from the file to e's call.
func patternValues(e ast.Expr, stack []ast.Node) ([]string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(e.Value)
		return []string{s}, err == nil
	case *ast.BinaryExpr:
		lit, ok1 := e.X.(*ast.BasicLit)
		v, ok2 := e.Y.(*ast.Ident)
		if e.Op != token.ADD || !ok1 || !ok2 {
			return nil, false
		}
		prefix, err := strconv.Unquote(lit.Value)
		if err != nil {
			return nil, false
		}
		for i := len(stack) - 1; i >= 0; i-- {
			rs, ok := stack[i].(*ast.RangeStmt)
			if !ok {
				continue
			}
			cl, ok := rs.X.(*ast.CompositeLit)
			if !ok {
				return nil, false
			}
			isKey := rs.Key != nil && rs.Key.(*ast.Ident).Name == v.Name
			isValue := rs.Value != nil && rs.Value.(*ast.Ident).Name == v.Name
			if !isKey && !isValue {
				continue
			}
			var out []string
			for _, el := range cl.Elts {
				x := el
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if !isKey {
						return nil, false
					}
					x = kv.Key
				}
				lit, ok := x.(*ast.BasicLit)
				if !ok {
					return nil, false
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, false
				}
				out = append(out, prefix+s)
			}
			return out, true
		}
	}
	return nil, false
}

// docRoute is the route a pattern's path is described under: the same
// path, without the {$} that ends it exactly.
func docPath(p string) string { return strings.TrimSuffix(p, "{$}") }

var methods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// documented are the operations the document describes.
func documented(s *spec) []route {
	var out []route
	for path, ops := range s.Paths {
		for m := range ops {
			if slices.Contains(methods, m) {
				out = append(out, route{strings.ToUpper(m), path})
			}
		}
	}
	return out
}

// Every route the admin handler serves is described in openapi.json, and
// every operation described is one it serves: a route added without its
// description, or a description left after its route went, fails here.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	served := servedRoutes(t)
	if len(served) < 50 {
		t.Fatalf("found %d routes in the package's files: %v", len(served), served)
	}
	docs := documented(s)
	isDoc := map[route]bool{}
	docPaths := map[string]bool{}
	for _, d := range docs {
		isDoc[d] = true
		docPaths[d.path] = true
	}
	servedAs := map[route]bool{}
	for _, r := range served {
		p := docPath(r.path)
		servedAs[route{r.method, p}] = true
		switch {
		case r.method == "" && !docPaths[p]:
			t.Errorf("served and not described in openapi.json: %s (any method)", r)
		case r.method != "" && !isDoc[route{r.method, p}]:
			t.Errorf("served and not described in openapi.json: %s", r)
		}
	}
	for _, d := range docs {
		if !servedAs[d] && !servedAs[route{"", d.path}] {
			t.Errorf("described in openapi.json and not served: %s", d)
		}
	}
}

// pathParam is a path parameter in a described path.
var pathParam = regexp.MustCompile(`\{[a-z]+\}`)

// Each described operation, sent to a real admin listener, is answered
// by a route of its own, not by the mux's 404 or 405: the routes read
// from the source are the ones the handler serves.
func TestOpenAPIOperationsAreServed(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", nil, nil)
	client := &http.Client{Timeout: bt.Wait, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, d := range documented(loadSpec(t)) {
		path := pathParam.ReplaceAllString(d.path, "x")
		req, err := http.NewRequest(d.method, "http://"+b.AdminAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(admin.Header, "test")
		resp, err := client.Do(req) // streams answer with their headers at once
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		resp.Body.Close()
		muxOwn := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") &&
			(resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed)
		if muxOwn {
			t.Errorf("%s (as %s %s): %s from the mux itself: no route serves it", d, d.method, path, resp.Status)
		}
	}
}

// schemaTypes are the schemas that are a Go type's JSON.
var schemaTypes = map[string]reflect.Type{
	"JobInfo":         reflect.TypeFor[admin.JobInfo](),
	"JobSpec":         reflect.TypeFor[admin.JobSpec](),
	"Enqueued":        reflect.TypeFor[admin.Enqueued](),
	"JobPage":         reflect.TypeFor[admin.JobPage](),
	"Parent":          reflect.TypeFor[admin.Parent](),
	"TrailEvent":      reflect.TypeFor[store.TrailEvent](),
	"Progress":        reflect.TypeFor[broker.Progress](),
	"QueueInfo":       reflect.TypeFor[broker.QueueInfo](),
	"QueueLoad":       reflect.TypeFor[broker.QueueLoad](),
	"WorkerInfo":      reflect.TypeFor[broker.WorkerInfo](),
	"BulkResult":      reflect.TypeFor[admin.BulkResult](),
	"QueueChange":     reflect.TypeFor[broker.QueueChange](),
	"TenantPage":      reflect.TypeFor[broker.TenantPage](),
	"TenantInfo":      reflect.TypeFor[broker.TenantInfo](),
	"TenantSettings":  reflect.TypeFor[store.TenantSettings](),
	"TenantChange":    reflect.TypeFor[broker.TenantChange](),
	"LimiterInfo":     reflect.TypeFor[broker.LimiterInfo](),
	"LimiterSettings": reflect.TypeFor[store.LimiterSettings](),
	"Why":             reflect.TypeFor[broker.Why](),
	"ParentWhy":       reflect.TypeFor[broker.ParentWhy](),
	"AheadCounts":     reflect.TypeFor[broker.AheadCounts](),
	"ScheduleInfo":    reflect.TypeFor[admin.ScheduleInfo](),
	"SchedulePage":    reflect.TypeFor[admin.SchedulePage](),
	"ScheduleSpec":    reflect.TypeFor[admin.ScheduleSpec](),
	"BatchInfo":       reflect.TypeFor[admin.BatchInfo](),
	"BatchPage":       reflect.TypeFor[admin.BatchPage](),
	"Overview":        reflect.TypeFor[admin.Overview](),
	"GroupInfo":       reflect.TypeFor[admin.GroupInfo](),
	"ShardsInfo":      reflect.TypeFor[shards.Info](),
	"ShardInfo":       reflect.TypeFor[shards.ShardInfo](),
	"Move":            reflect.TypeFor[emqp.Move](),
	"Event":           reflect.TypeFor[broker.Event](),
	"QueueSettings":   reflect.TypeFor[store.QueueSettings](),
	"StoredJob":       reflect.TypeFor[store.Job](),
	"StoredSchedule":  reflect.TypeFor[store.Schedule](),
	"ImportResult":    reflect.TypeFor[admin.ImportResult](),
	"RekeyStatus":     reflect.TypeFor[store.RekeyStatus](),
}

// handShapes are the schemas of answers built in place (a map, a
// MarshalJSON, an unexported type): the live test checks them.
var handShapes = []string{"Error", "StatsInfo", "Removed", "Retried", "Paused", "Purged", "Compacted",
	"Session", "Login", "Role", "Ended", "ForgetList", "Empty", "JobRefusal", "NotDone"}

// goField is one JSON member of a Go type.
type goField struct {
	t        reflect.Type
	required bool // no omitempty or omitzero: always there
}

// jsonFields are t's JSON members, embedded structs' flattened.
func jsonFields(t reflect.Type) map[string]goField {
	out := map[string]goField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = goField{f.Type, !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero")}
	}
	return out
}

var textMarshaler = reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()

var (
	rawJSON     = reflect.TypeFor[json.RawMessage]()
	unmarshaler = reflect.TypeFor[json.Unmarshaler]()
	marshaler   = reflect.TypeFor[json.Marshaler]()
)

// jsonType is the JSON type Go type t is written as; "any" for raw JSON
// and for a type only read (its own UnmarshalJSON, as JobSpec's
// durations: "10s" or seconds), whose schema says what it reads.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawJSON, reflect.PointerTo(t).Implements(unmarshaler) && !t.Implements(marshaler) && !reflect.PointerTo(t).Implements(marshaler):
		return "any"
	case t == reflect.TypeFor[time.Time]():
		return "string"
	case t.Implements(textMarshaler):
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string" // base64
		}
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return "?" + t.String()
}

// Each schema named after a Go type has exactly that type's JSON fields,
// of their JSON types, and requires exactly those always written (no
// omitempty): a field renamed, added or dropped in Go fails here, also
// one no test answer happens to carry.
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	for name := range s.Components.Schemas {
		if schemaTypes[name] == nil && !slices.Contains(handShapes, name) {
			t.Errorf("schema %s is neither a Go type's (schemaTypes) nor checked live (handShapes)", name)
		}
	}
	for name, gt := range schemaTypes {
		sc := s.Components.Schemas[name]
		if sc == nil {
			t.Errorf("schema %s (%v) is missing", name, gt)
			continue
		}
		sc = s.resolve(sc)
		fields := jsonFields(gt)
		for f, gf := range fields {
			ps := sc.Properties[f]
			if ps == nil {
				t.Errorf("%s: %v's field %q is not in the schema", name, gt, f)
				continue
			}
			want := jsonType(gf.t)
			if got := s.resolve(ps).types(); want != "any" && !slices.Contains(got, want) {
				t.Errorf("%s.%s: the schema says %v; %v writes %s", name, f, got, gf.t, want)
			}
			if req := slices.Contains(sc.Required, f); req != gf.required {
				t.Errorf("%s.%s: required %v in the schema; always written in JSON: %v", name, f, req, gf.required)
			}
		}
		for f := range sc.Properties {
			if _, ok := fields[f]; !ok {
				t.Errorf("%s: the schema names %q, which %v does not have", name, f, gt)
			}
		}
	}
}

// check reports where v, a JSON value, does not fit sc: a required
// field missing, a field the schema does not name, a value of another
// type. seen collects the schema's fields met.
func (s *spec) check(sc *schema, v any, at string, problems *[]string) {
	sc = s.resolve(sc)
	if len(sc.Type) == 0 && sc.Properties == nil && sc.Items == nil && sc.AdditionalProperties == nil {
		return // {}: anything
	}
	types := sc.types()
	fits := func(name string) bool { return len(types) == 0 || slices.Contains(types, name) }
	bad := func(format string, args ...any) { *problems = append(*problems, at+": "+fmt.Sprintf(format, args...)) }
	switch v := v.(type) {
	case nil:
		if !fits("null") {
			bad("null, and the schema says %v", types)
		}
	case string:
		if !fits("string") {
			bad("a string, and the schema says %v", types)
		}
	case bool:
		if !fits("boolean") {
			bad("a boolean, and the schema says %v", types)
		}
	case json.Number:
		f, _ := v.Float64()
		if !fits("number") && !(fits("integer") && f == math.Trunc(f) && !strings.ContainsAny(v.String(), ".eE")) {
			bad("the number %s, and the schema says %v", v, types)
		}
	case []any:
		if !fits("array") {
			bad("an array, and the schema says %v", types)
			return
		}
		for i, e := range v {
			if sc.Items != nil {
				s.check(sc.Items, e, fmt.Sprintf("%s[%d]", at, i), problems)
			}
		}
	case map[string]any:
		if !fits("object") {
			bad("an object, and the schema says %v", types)
			return
		}
		for _, r := range sc.Required {
			if _, ok := v[r]; !ok {
				bad("the schema's required field %q is missing", r)
			}
		}
		for k, e := range v {
			switch {
			case sc.Properties[k] != nil:
				s.check(sc.Properties[k], e, at+"."+k, problems)
			case sc.AdditionalProperties != nil:
				s.check(sc.AdditionalProperties, e, at+"."+k, problems)
			default:
				bad("field %q is not in the schema", k)
			}
		}
	}
}

// answerSchema is the schema the document gives path's answer with
// status to method.
func (s *spec) answerSchema(t *testing.T, method, path string, status int) *schema {
	t.Helper()
	ops := s.Paths[path]
	if ops == nil {
		t.Fatalf("%s is not described", path)
	}
	op, ok := ops[strings.ToLower(method)]
	if !ok {
		t.Fatalf("%s %s is not described", method, path)
	}
	r := op.Responses[strconv.Itoa(status)]
	if r == nil {
		t.Fatalf("%s %s: no %d answer described", method, path, status)
	}
	c, ok := s.response(r).Content["application/json"]
	if !ok || c.Schema == nil {
		t.Fatalf("%s %s: the %d answer has no JSON schema", method, path, status)
	}
	return c.Schema
}

// A running broker's answers to the main GET routes fit the schemas the
// document gives them: every field a schema requires is there, every
// field there is one the schema names, of its type.
func TestOpenAPIAnswersFitSchemas(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", keepResults, nil)
	f := makeFixture(t, b)
	if code, text := bt.Post(t, b, "/api/v1/schedules", admin.ScheduleSpec{Queue: "q", Every: "1h", Headers: "nohaste,schedule-id:hourly", Payload: "hello"}); code != http.StatusOK {
		t.Fatalf("a schedule: %d %s", code, text)
	}
	req, _ := http.NewRequest("PUT", "http://"+b.AdminAddr()+"/api/v1/limiters/smtp", strings.NewReader(`{"concurrency": 2}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a limiter: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	s := loadSpec(t)
	cases := []struct {
		path   string // described
		get    string // asked
		status int
	}{
		{"/api/v1/stats", "/api/v1/stats", 200},
		{"/api/v1/queues", "/api/v1/queues", 200},
		{"/api/v1/queues/{queue}", "/api/v1/queues/q", 200},
		{"/api/v1/queues/{queue}", "/api/v1/queues/nosuch", 404},
		{"/api/v1/workers", "/api/v1/workers", 200},
		{"/api/v1/jobs", "/api/v1/jobs", 200},
		{"/api/v1/jobs", "/api/v1/jobs?state=inflight", 200},
		{"/api/v1/jobs", "/api/v1/jobs?state=done", 200},
		{"/api/v1/jobs", "/api/v1/jobs?state=dead", 200},
		{"/api/v1/jobs", "/api/v1/jobs?state=nosuch", 400},
		{"/api/v1/jobs/{msgid}", "/api/v1/jobs/" + f.inflight, 200},
		{"/api/v1/jobs/{msgid}", "/api/v1/jobs/" + f.done + "?payload=1", 200},
		{"/api/v1/jobs/{msgid}", "/api/v1/jobs/" + f.dead, 200},
		{"/api/v1/jobs/{msgid}", "/api/v1/jobs/" + f.batch, 200},
		{"/api/v1/jobs/{msgid}", "/api/v1/jobs/nosuch", 404},
		{"/api/v1/jobs/{msgid}/why", "/api/v1/jobs/" + f.pending + "/why", 200},
		{"/api/v1/jobs/{msgid}/why", "/api/v1/jobs/" + f.inflight + "/why", 200},
		{"/api/v1/queues/{queue}/tenants", "/api/v1/queues/q/tenants", 200},
		{"/api/v1/limiters", "/api/v1/limiters", 200},
		{"/api/v1/schedules", "/api/v1/schedules", 200},
		{"/api/v1/schedules/{id}", "/api/v1/schedules/hourly?payload=1", 200},
		{"/api/v1/batches", "/api/v1/batches", 200},
		{"/api/v1/batches/{name}", "/api/v1/batches/1", 200},
		{"/api/v1/overview", "/api/v1/overview", 200},
		{"/api/v1/journal/rekey", "/api/v1/journal/rekey", 200},
		{"/api/v1/shards", "/api/v1/shards", 404},
		{"/ui/session", "/ui/session", 200},
		{"/api/v1/openapi.json", "/api/v1/openapi.json", 200},
	}
	for _, c := range cases {
		resp, err := http.Get("http://" + b.AdminAddr() + c.get)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.status {
			t.Errorf("GET %s: %d, want %d: %s", c.get, resp.StatusCode, c.status, body)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Errorf("GET %s: %v in %s", c.get, err, body)
			continue
		}
		var problems []string
		s.check(s.answerSchema(t, "GET", c.path, c.status), v, "GET "+c.get, &problems)
		sort.Strings(problems)
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// GET /api/v1/openapi.json serves the document as it is in the
// package's source, JSON that names OpenAPI 3.1.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", nil, nil)
	resp, err := http.Get("http://" + b.AdminAddr() + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ OpenAPI string }
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, file) ||
		json.Unmarshal(body, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Errorf("GET /api/v1/openapi.json: %s %q, %d bytes (openapi.json: %d), openapi %q",
			resp.Status, resp.Header.Get("Content-Type"), len(body), len(file), doc.OpenAPI)
	}
}
