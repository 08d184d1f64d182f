package broker_test

import (
	"strings"
	"testing"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// A bad value of priority, unique or unique-for is refused with ERROR
// bad_request naming the header, and nothing is stored.
func TestBadJobHeadersAreRefusedByName(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	cases := map[string]string{
		"priority:-1":                        "header priority",
		"priority:65536":                     "header priority",
		"priority:high":                      "header priority",
		"priority:":                          "header priority",
		`{"unique": ""}`:                     "header unique",
		"unique:" + strings.Repeat("k", 256): "header unique",
		"unique:k,unique-for:-1":             "header unique-for",
		"unique:k,unique-for:1.5":            "header unique-for",
		"unique:k,unique-for:99999999999":    "header unique-for",
		"unique-for:60":                      "header unique-for needs header unique",
	}
	for headers, name := range cases {
		h, err := emqp.ParseHeaders(headers)
		if err != nil {
			t.Fatal(err)
		}
		id := emqp.NewID()
		client.Send(&emqp.Request{MsgID: id, Queue: "q", Headers: h})
		e := bt.Expect[*emqp.Error](client)
		if e.RefMsgID != id || e.Code != emqp.CodeBadRequest || !strings.Contains(e.Text, name) {
			t.Errorf("%.40q: ERROR %s %q; want bad_request naming %q", headers, e.Code, e.Text, name)
		}
	}
	if n := b.Stats().Acked; n != 0 {
		t.Fatalf("%d jobs ACKed", n)
	}
	if n := pendingOf(t, b, "q"); n != 0 {
		t.Fatalf("%d jobs stored", n)
	}
}
