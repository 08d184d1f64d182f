package emqp_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
)

func mustHeaders(t *testing.T, s string) emqp.Headers {
	t.Helper()
	h, err := emqp.ParseHeaders(s)
	if err != nil {
		t.Fatalf("ParseHeaders(%q): %v", s, err)
	}
	return h
}

func TestRoundTripEveryCommand(t *testing.T) {
	t.Parallel()
	id, orig := emqp.NewID(), emqp.NewID()
	binary := []byte{0, 0xff, 0xfe, 'a', 0, '\n', 0xc3} // NUL and invalid UTF-8
	msgs := []emqp.Message{
		&emqp.Request{MsgID: id, Queue: "email", Headers: mustHeaders(t, "reply-requested,timeout:30,x-tenant:acme"), Payload: binary},
		&emqp.Request{MsgID: id, Queue: "q"},
		&emqp.Request{MsgID: id, Queue: "q", Headers: emqp.HeadersFrom(emqp.Header{Name: "note", Value: "a,b"}), Payload: []byte("p")},
		&emqp.Ack{MsgID: id, AckedID: orig},
		&emqp.Inform{MsgID: id, Queues: []emqp.Queue{{Weight: 10, Name: "default"}, {Weight: 0, Name: "low,comma"}}, PeerType: emqp.PeerWorker},
		&emqp.Inform{MsgID: id, PeerType: emqp.PeerScheduler},
		&emqp.Ready{MsgID: id},
		&emqp.Reply{MsgID: id, Payload: binary, OrigMsgID: orig},
		&emqp.Fail{MsgID: id, OrigMsgID: orig, Reason: "boom"},
		&emqp.Error{MsgID: id, RefMsgID: orig, Code: emqp.CodeQueueFull, Text: "queue q holds 10 jobs, its limit"},
		&emqp.Error{MsgID: id, Code: emqp.CodeBadRequest, Text: "no ref"},
		&emqp.Heartbeat{MsgID: id, Time: "1795972544.4083364"},
		&emqp.Heartbeat{MsgID: id},
		&emqp.Kbye{MsgID: id},
		&emqp.Disconnect{MsgID: id},
		&emqp.Schedule{MsgID: id, Queue: "q", Headers: mustHeaders(t, "nohaste"), Interval: 60, Payload: binary},
		&emqp.Schedule{MsgID: id, Queue: "q", Interval: emqp.CronInterval, Payload: []byte("x"), Cron: "*/5 * * * *"},
		&emqp.Unschedule{MsgID: id, Queue: "q", Interval: 60, Payload: []byte("x")},
		&emqp.Publish{MsgID: id, Topic: "orders.eu", Message: binary},
		&emqp.Publish{MsgID: id},
		&emqp.Cancel{MsgID: id, OrigMsgID: orig},
		&emqp.Progress{MsgID: id, OrigMsgID: orig, Text: "40 copied"},
		&emqp.Routes{MsgID: id},
		&emqp.Routes{MsgID: id, Table: []byte(`{"version":1}`)},
		&emqp.Bulk{MsgID: id, Jobs: []emqp.BulkJob{
			{MsgID: orig, Queue: "email", Headers: mustHeaders(t, "priority:5,unique:k"), Payload: binary},
			{MsgID: "j2", Queue: "q"},
			{MsgID: "j3", Queue: "q", Headers: emqp.HeadersFrom(emqp.Header{Name: "note", Value: "a,b"}), Payload: []byte("p")},
		}},
	}
	seen := map[emqp.Command]bool{}
	for _, m := range msgs {
		seen[m.Command()] = true
		frames := emqp.Encode(m)
		got, err := emqp.Decode(frames)
		if err != nil {
			t.Fatalf("%s: decode of encoded: %v", m.Command(), err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%s: round trip\n got %#v\nwant %#v", m.Command(), got, m)
		}
	}
	if len(seen) != 17 {
		t.Fatalf("round trip covers %d commands, want all 17", len(seen))
	}
}

func TestEncodeRichestForms(t *testing.T) {
	t.Parallel()
	id := emqp.NewID()
	reply := emqp.Encode(&emqp.Reply{MsgID: id, Payload: []byte("r"), OrigMsgID: "o"})
	if len(reply) != 6 || string(reply[5]) != "o" {
		t.Fatalf("REPLY frames %q, want 6 with the orig msgid last", reply)
	}
	inform := emqp.Encode(&emqp.Inform{MsgID: id, Queues: []emqp.Queue{{Weight: 10, Name: "email"}}})
	if len(inform) != 6 || string(inform[4]) != `[[10,"email"]]` {
		t.Fatalf("INFORM frames %q, want JSON queues and a type frame", inform)
	}
	hb := emqp.Encode(&emqp.Heartbeat{MsgID: id, Time: "1"})
	if len(hb) != 5 {
		t.Fatalf("HEARTBEAT frames %q, want the time frame", hb)
	}
}

func TestDecodeDoesNotChangePayloadBytes(t *testing.T) {
	t.Parallel()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	m, err := emqp.Decode(emqp.Encode(&emqp.Request{MsgID: "m", Queue: "q", Payload: all}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.(*emqp.Request).Payload, all) {
		t.Fatal("payload changed on the way")
	}
}

func TestDecodeErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	cases := []struct {
		frames []string
		class  emqp.Class
		text   string
	}{
		{[]string{"", "eMQP/1.0", "REQUEST", "m", "q"}, emqp.ErrFrames, "REQUEST needs 7 frames, got 5"},
		{[]string{"", "eMQP/1.0", "INFORM", "m", "a", "worker", "x"}, emqp.ErrFrames, "INFORM needs 5 or 6 frames, got 7"},
		{[]string{"", "eMQP/1.0", "ACK", "m", ""}, emqp.ErrMsgID, "acked msgid is empty"},
		{[]string{"", "eMQP/1.0", "FAIL", "m", "", "why"}, emqp.ErrMsgID, "orig msgid is empty"},
		{[]string{"", "eMQP/1.0", "REQUEST", "m", strings.Repeat("q", 256), "", ""}, emqp.ErrQueue, "over the limit of 255"},
		{[]string{"", "eMQP/1.0", "PUBLISH", "m", "topic"}, emqp.ErrFrames, "PUBLISH needs 6 frames, got 5"},
		{[]string{"", "eMQP/1.0", "PUBLISH", "m", strings.Repeat("t", 1025), "x"}, emqp.ErrTopic, "over the limit of 1024"},
		{[]string{"", "eMQP/1.0", "REQUEST", "m", "q", ":5", ""}, emqp.ErrHeaders, "has a colon but no name"},
		{[]string{"", "eMQP/1.0", "SCHEDULE", "m", "q", "", "-2", "", ""}, emqp.ErrInterval, "-1 for cron"},
		{[]string{"", "eMQP/1.0", "SCHEDULE", "m", "q", "", "-1", "", " "}, emqp.ErrCron, "needs a cron expression"},
		{[]string{"", "eMQP/1.0", "INFORM", "m", `[[10, ""]]`}, emqp.ErrQueues, "empty"},
		{[]string{"", "eMQP/1.0", "INFORM", "m", `[["10", "a"]]`}, emqp.ErrQueues, "not [weight"},
	}
	for _, c := range cases {
		var frames [][]byte
		for _, f := range c.frames {
			frames = append(frames, []byte(f))
		}
		_, err := emqp.Decode(frames)
		var de *emqp.DecodeError
		if !errors.As(err, &de) || de.Class != c.class || !errors.Is(err, c.class) {
			t.Errorf("%q: error %v, want class %s", c.frames, err, c.class)
			continue
		}
		if !strings.Contains(de.Text, c.text) {
			t.Errorf("%q: text %q does not say %q", c.frames, de.Text, c.text)
		}
		if de.MsgID != "m" && c.class != emqp.ErrFrames {
			t.Errorf("%q: error keeps msgid %q, want m (for ERROR's ref_msgid)", c.frames, de.MsgID)
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	h := mustHeaders(t, " reply-requested , timeout:2.5,retry-count:5,x-a:1,x-a:2,cb:http://h/x")
	if !h.ReplyRequested() || h.NoHaste() || h.Guarantee() {
		t.Fatal("flags read wrong")
	}
	if d, err := h.Timeout(); err != nil || d != 2500*time.Millisecond {
		t.Fatalf("Timeout = %v, %v", d, err)
	}
	if n, err := h.RetryCount(3); err != nil || n != 5 {
		t.Fatalf("RetryCount = %d, %v", n, err)
	}
	if v, _ := h.Get("x-a"); v != "2" {
		t.Fatalf("a repeated name: got %q, want the last (2)", v)
	}
	if v, _ := h.Get("cb"); v != "http://h/x" {
		t.Fatalf("value with a colon: %q", v)
	}
	var none emqp.Headers
	if n, err := none.RetryCount(3); n != 3 || err != nil {
		t.Fatalf("absent retry-count = %d, %v; want the default 3", n, err)
	}
	if d, err := none.Delay(); d != 0 || err != nil {
		t.Fatalf("absent delay = %v, %v", d, err)
	}

	for _, bad := range []string{"timeout:abc", "timeout:-1", "timeout:NaN", "timeout:1e300"} {
		if _, err := mustHeaders(t, bad).Timeout(); !errors.Is(err, emqp.ErrHeaders) {
			t.Errorf("%s: Timeout error %v, want a headers error", bad, err)
		}
	}
	for _, bad := range []string{"retry-count:x", "retry-count:-1", "retry-count:1.5"} {
		if _, err := mustHeaders(t, bad).RetryCount(3); !errors.Is(err, emqp.ErrHeaders) {
			t.Errorf("%s: RetryCount error %v, want a headers error", bad, err)
		}
	}
	if _, err := mustHeaders(t, "run_count:z").RunCount(); !errors.Is(err, emqp.ErrHeaders) {
		t.Error("run_count:z is not an error")
	}
	if _, err := mustHeaders(t, "delay:z").Delay(); !errors.Is(err, emqp.ErrHeaders) {
		t.Error("delay:z is not an error")
	}

	// Set and Del keep unknown items and write the comma form when they can.
	h2 := mustHeaders(t, "x-tenant:acme").Set(emqp.HeaderReplyRequested, "")
	if h2.String() != "x-tenant:acme,reply-requested" {
		t.Fatalf("Set: %q", h2)
	}
	if h2.Del("x-tenant").String() != "reply-requested" {
		t.Fatalf("Del: %q", h2.Del("x-tenant"))
	}
	if same := h2.Set(emqp.HeaderReplyRequested, ""); same != h2 {
		t.Fatalf("Set of a present flag changed the headers: %q", same)
	}
}

func TestJSONHeaders(t *testing.T) {
	t.Parallel()
	h := mustHeaders(t, `{"timeout": 30, "reply-requested": true, "nohaste": false, "gone": null, "t": "abc"}`)
	if h.String() != "timeout:30,reply-requested,t:abc" {
		t.Fatalf("JSON headers that fit the comma form: %q", h)
	}
	// A value with a comma cannot be written as CSV: JSON is kept.
	h = mustHeaders(t, `{"note": "a,b", "timeout": 5}`)
	if !strings.HasPrefix(h.String(), "{") {
		t.Fatalf("headers with a comma in a value lost their JSON form: %q", h)
	}
	if v, _ := h.Get("note"); v != "a,b" {
		t.Fatalf("note = %q", v)
	}
	if d, _ := h.Timeout(); d != 5*time.Second {
		t.Fatalf("timeout = %v", d)
	}
	again := mustHeaders(t, h.String())
	if again != h {
		t.Fatalf("JSON headers do not read back the same: %q vs %q", again, h)
	}
	for _, bad := range []string{`{`, `{"a": [1]}`, `{"a": {}}`, `{"a": 1} x`, `{"": 1}`, `{1: 2}`} {
		if _, err := emqp.ParseHeaders(bad); !errors.Is(err, emqp.ErrHeaders) {
			t.Errorf("%s: error %v, want a headers error", bad, err)
		}
	}
}

func TestHeadersFromOrderAndMap(t *testing.T) {
	t.Parallel()
	h := emqp.HeadersFrom(emqp.Header{Name: "b", Value: "1"}, emqp.Header{Name: "a"}, emqp.Header{Name: "b", Value: "2"}, emqp.Header{})
	if h.String() != "b:2,a" {
		t.Fatalf("HeadersFrom = %q", h)
	}
	m := h.Map()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, []string{"a", "b"}) || m["b"] != "2" {
		t.Fatalf("Map = %v", m)
	}
	if !reflect.DeepEqual(h.Items(), []emqp.Header{{Name: "b", Value: "2"}, {Name: "a"}}) {
		t.Fatalf("Items = %v", h.Items())
	}
}

func TestNewIDIsTimeOrdered(t *testing.T) {
	t.Parallel()
	prev := emqp.NewID()
	for range 1000 {
		id := emqp.NewID()
		if id <= prev {
			t.Fatalf("id %s does not sort after %s", id, prev)
		}
		prev = id
	}
}

func TestManyHeaderItemsAreLinear(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 200000 {
		fmt.Fprintf(&b, "x%d:%d,", i, i)
	}
	b.WriteString("x7:last")
	h := mustHeaders(t, b.String())
	items := h.Set(emqp.HeaderReplyRequested, "").Items()
	if len(items) != 200001 || items[7].Value != "last" {
		t.Fatalf("%d items, item 7 = %v", len(items), items[7])
	}
}

func TestNamelessHeaderItems(t *testing.T) {
	t.Parallel()
	for s, bad := range map[string]bool{
		":5": true, " : 5": true, "a,:5": true, "a:1, :x,b": true, "a:b:c,:": true,
		"a:1": false, "a,b": false, "": false, " , ,": false, "a:,b": false, "a:x:y": false, ":": true, ",:,": true,
	} {
		_, err := emqp.ParseHeaders(s)
		if got := err != nil; got != bad {
			t.Errorf("ParseHeaders(%q) error = %v, want error %v", s, err, bad)
		}
	}
}

func TestReadMessageSkipsUndecodable(t *testing.T) {
	t.Parallel()
	msgs := [][][]byte{{[]byte("junk")}, emqp.Encode(&emqp.Ready{MsgID: "r1"})}
	var bad []error
	read := func() ([][]byte, error) {
		if len(msgs) == 0 {
			return nil, io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
	m, err := emqp.ReadMessage(read, func(err error) { bad = append(bad, err) })
	if err != nil || m.ID() != "r1" || len(bad) != 1 || !errors.Is(bad[0], emqp.ErrFrames) {
		t.Fatalf("got %v %v, bad %v", m, err, bad)
	}
	if _, err := emqp.ReadMessage(read, nil); err != io.EOF {
		t.Fatalf("end of the stream: %v", err)
	}
}

// EventMQ's client unschedules with interval -1 and no cron: the
// schedule is named by its payload, and the UNSCHEDULE is taken.
func TestUnscheduleNeedsNoCron(t *testing.T) {
	t.Parallel()
	m, err := emqp.Decode([][]byte{[]byte(""), []byte("eMQP/1.0"), []byte("UNSCHEDULE"), []byte("m"), []byte("q"),
		[]byte("guarantee"), []byte("-1"), []byte(`["run", {}]`), []byte("")})
	if u, ok := m.(*emqp.Unschedule); err != nil || !ok || u.Interval != emqp.CronInterval {
		t.Fatalf("UNSCHEDULE as EventMQ's client sends it: %+v, %v", m, err)
	}
}

// The headers of priorities and unique jobs: their values, their
// defaults, and a bad value refused naming its header.
func TestJobHeaders(t *testing.T) {
	t.Parallel()
	if p, err := mustHeaders(t, "").Priority(); err != nil || p != emqp.DefaultPriority {
		t.Fatalf("no header: priority %d, %v; want %d", p, err, emqp.DefaultPriority)
	}
	for v, want := range map[string]uint16{"0": 0, "7": 7, "65535": 65535} {
		if p, err := mustHeaders(t, "priority:"+v).Priority(); err != nil || p != want {
			t.Fatalf("priority:%s: %d, %v", v, p, err)
		}
	}
	for _, v := range []string{"-1", "65536", "1.5", "x", ""} {
		if _, err := mustHeaders(t, "priority:"+v).Priority(); err == nil || !strings.Contains(err.Error(), "header priority") {
			t.Fatalf("priority:%q: %v, want an error naming the header", v, err)
		}
	}
	k, hold, err := mustHeaders(t, "unique:user-42,unique-for:3600").Unique()
	if err != nil || k != "user-42" || hold != time.Hour {
		t.Fatalf("unique: %q %v %v", k, hold, err)
	}
	if k, _, err := mustHeaders(t, "x").Unique(); err != nil || k != "" {
		t.Fatalf("no unique key: %q %v", k, err)
	}
	for h, name := range map[string]string{
		"unique:" + strings.Repeat("k", 256): "header unique:",
		`{"unique": ""}`:                     "header unique:",
		"unique:k,unique-for:-1":             "header unique-for",
		"unique:k,unique-for:1h":             "header unique-for",
		"unique-for:10":                      "header unique-for needs header unique",
	} {
		if _, _, err := mustHeaders(t, h).Unique(); err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("%.40q: %v, want an error naming %q", h, err, name)
		}
	}
	text := emqp.DuplicateText("q", "user-42", "job-1")
	if id, ok := emqp.DuplicateHolder(text); !ok || id != "job-1" {
		t.Fatalf("DuplicateHolder(%q) = %q, %v", text, id, ok)
	}
}

func TestTenantAndLimits(t *testing.T) {
	if name, err := mustHeaders(t, "x").Tenant(); err != nil || name != "" {
		t.Fatalf("no tenant: %q %v", name, err)
	}
	if name, err := mustHeaders(t, "tenant:acme").Tenant(); err != nil || name != "acme" {
		t.Fatalf("tenant:acme: %q %v", name, err)
	}
	for _, h := range []string{"tenant:" + strings.Repeat("t", 256), `{"tenant": ""}`, "tenant"} {
		if _, err := mustHeaders(t, h).Tenant(); err == nil || !strings.Contains(err.Error(), "header tenant:") {
			t.Fatalf("%.40q: %v, want an error naming the header", h, err)
		}
	}
	names, err := mustHeaders(t, "limit:api;db;api").Limits()
	if err != nil || strings.Join(names, ";") != "api;db" {
		t.Fatalf("limit:api;db;api: %q %v", names, err)
	}
	if names, err := mustHeaders(t, "x").Limits(); err != nil || names != nil {
		t.Fatalf("no limit: %q %v", names, err)
	}
	for _, h := range []string{"limit:a;b;c;d;e", "limit:a;;b", "limit", "limit:" + strings.Repeat("l", 256)} {
		if _, err := mustHeaders(t, h).Limits(); err == nil || !strings.Contains(err.Error(), "header limit:") {
			t.Fatalf("%.40q: %v, want an error naming the header", h, err)
		}
	}
	if names, err := mustHeaders(t, "limit:a;b;c;d").Limits(); err != nil || len(names) != 4 {
		t.Fatalf("four limiters: %q %v", names, err)
	}
}

func TestBulkJobText(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"m7", "", `a "quoted" (id): x`, "\xff\x00"} {
		text := "emqp: BULK: " + emqp.BulkJobText(7, id, emqp.DuplicateText("q", "k", "job-1"))
		i, got, rest, ok := emqp.BulkJobOf(text)
		if !ok || i != 7 || got != id {
			t.Fatalf("BulkJobOf(%q) = %d, %q, %v; want 7, %q", text, i, got, ok, id)
		}
		if holder, ok := emqp.DuplicateHolder(rest); !ok || holder != "job-1" {
			t.Fatalf("the rest %q does not name the holder: %q", rest, holder)
		}
	}
	if _, _, _, ok := emqp.BulkJobOf("queue q is full"); ok {
		t.Fatal("BulkJobOf read a job from a text without one")
	}
}

// A refusal echoes a long name cut, with its length: a 70,000-byte queue
// name makes a short ERROR text, not a 70 KB one.
func TestLongNamesEchoedCut(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"q", `"q"`},
		{strings.Repeat("x", emqp.MaxQuoted), `"` + strings.Repeat("x", emqp.MaxQuoted) + `"`},
		{strings.Repeat("x", 70000), `"` + strings.Repeat("x", emqp.MaxQuoted) + `"… (70000 bytes)`},
		{strings.Repeat("x", emqp.MaxQuoted-1) + "é" + "x", `"` + strings.Repeat("x", emqp.MaxQuoted-1) + `"… (66 bytes)`}, // not half a rune
	} {
		if got := emqp.QuoteName(c.in); got != c.want {
			t.Errorf("QuoteName of %d bytes: %s, want %s", len(c.in), got, c.want)
		}
	}
	long := strings.Repeat("x", 70000)
	_, err := emqp.Decode(emqp.Encode(&emqp.Inform{MsgID: "m", Queues: []emqp.Queue{{Weight: 10, Name: long}}, PeerType: emqp.PeerWorker}))
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(70000 bytes)") {
		t.Errorf("INFORM with a 70,000-byte queue name: %v, want a short refusal naming the length", err)
	}
	if _, err = mustHeaders(t, "timeout:"+long).Timeout(); err == nil || len(err.Error()) > 200 {
		t.Errorf("a 70,000-byte timeout: %d bytes of error", len(fmt.Sprint(err)))
	}
}
