package emqp_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/eventmq/emq/emqp"
)

// vectorsPath is where the shared wire cases live: ../shared beside the
// checkout, both on a developer's machine and in CI.
var vectorsPath = filepath.Join("..", "..", "shared", "emqp-vectors.json")

// extPath holds the cases of EMQ's own commands, in the same form.
var extPath = filepath.Join("testdata", "vectors-ext.json")

type vectorCase struct {
	Name      string         `json:"name"`
	Frames    []string       `json:"frames"`
	FramesB64 []string       `json:"frames_b64"`
	Want      map[string]any `json:"want"`
	Error     string         `json:"error"`
	ErrorText string         `json:"error_text"` // a part of the error's text, when given
}

func loadVectors(t testing.TB) []vectorCase {
	t.Helper()
	return append(readVectors(t, vectorsPath), readVectors(t, extPath)...)
}

func readVectors(t testing.TB, path string) []vectorCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the wire cases are missing: %v (expected ../shared/emqp-vectors.json beside the checkout)", err)
	}
	var file struct {
		Version int          `json:"version"`
		Decode  []vectorCase `json:"decode"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(file.Decode) == 0 {
		t.Fatalf("%s holds no decode cases", path)
	}
	return file.Decode
}

func (c vectorCase) frames(t testing.TB) [][]byte {
	var out [][]byte
	for _, f := range c.Frames {
		out = append(out, []byte(f))
	}
	for _, f := range c.FramesB64 {
		b, err := base64.StdEncoding.DecodeString(f)
		if err != nil {
			t.Fatalf("%s: frames_b64: %v", c.Name, err)
		}
		out = append(out, b)
	}
	return out
}

func TestVectors(t *testing.T) {
	t.Parallel()
	for _, c := range loadVectors(t) {
		t.Run(c.Name, func(t *testing.T) {
			m, err := emqp.Decode(c.frames(t))
			if c.Error != "" {
				if err == nil {
					t.Fatalf("decoded %#v, want a %s error", m, c.Error)
				}
				if !errors.Is(err, emqp.Class(c.Error)) {
					t.Fatalf("error %q, want class %s", err, c.Error)
				}
				var de *emqp.DecodeError
				if !errors.As(err, &de) || de.Text == "" {
					t.Fatalf("error %v is not a *DecodeError with a text", err)
				}
				if !strings.Contains(de.Text, c.ErrorText) {
					t.Fatalf("error text %q does not say %q", de.Text, c.ErrorText)
				}
				return
			}
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got := asVector(t, m); !reflect.DeepEqual(got, normalize(c.Want)) {
				t.Fatalf("decoded\n %v\nwant\n %v", got, normalize(c.Want))
			}
			// What decodes must re-encode to frames that decode the same.
			again, err := emqp.Decode(emqp.Encode(m))
			if err != nil || !reflect.DeepEqual(again, m) {
				t.Fatalf("re-encoded: %#v, %v; want %#v", again, err, m)
			}
		})
	}
}

// asVector shows a message in the vectors' "want" form.
func asVector(t *testing.T, m emqp.Message) map[string]any {
	v := map[string]any{"command": string(m.Command()), "msgid": m.ID()}
	headers := func(h emqp.Headers) map[string]any {
		out := map[string]any{}
		for k, x := range h.Map() {
			out[k] = x
		}
		return out
	}
	switch m := m.(type) {
	case *emqp.Request:
		v["queue"], v["headers"], v["payload"] = m.Queue, headers(m.Headers), string(m.Payload)
	case *emqp.Ack:
		v["acked_msgid"] = m.AckedID
	case *emqp.Inform:
		qs := []any{}
		for _, q := range m.Queues {
			qs = append(qs, []any{float64(q.Weight), q.Name})
		}
		v["queues"], v["peer_type"] = qs, m.PeerType
	case *emqp.Ready, *emqp.Kbye, *emqp.Disconnect:
	case *emqp.Reply:
		v["payload"], v["orig_msgid"] = string(m.Payload), m.OrigMsgID
	case *emqp.Fail:
		v["orig_msgid"], v["reason"] = m.OrigMsgID, m.Reason
	case *emqp.Error:
		v["ref_msgid"], v["code"], v["text"] = m.RefMsgID, m.Code, m.Text
	case *emqp.Heartbeat:
		v["time"] = m.Time
	case *emqp.Schedule:
		v["queue"], v["headers"], v["interval"], v["payload"], v["cron"] = m.Queue, headers(m.Headers), float64(m.Interval), string(m.Payload), m.Cron
	case *emqp.Publish:
		v["topic"], v["message"] = m.Topic, string(m.Message)
	case *emqp.Cancel:
		v["orig_msgid"] = m.OrigMsgID
	case *emqp.Progress:
		p, ok := m.Percent()
		if !ok {
			p = -1
		}
		v["orig_msgid"], v["text"], v["percent"], v["note"] = m.OrigMsgID, m.Text, float64(p), m.Note()
	case *emqp.Routes:
		v["table"] = string(m.Table)
	case *emqp.Bulk:
		jobs := []any{}
		for _, j := range m.Jobs {
			jobs = append(jobs, map[string]any{"msgid": j.MsgID, "queue": j.Queue, "headers": headers(j.Headers), "payload": string(j.Payload)})
		}
		v["jobs"] = jobs
	case *emqp.Unschedule:
		v["queue"], v["headers"], v["interval"], v["payload"], v["cron"] = m.Queue, headers(m.Headers), float64(m.Interval), string(m.Payload), m.Cron
	default:
		t.Fatalf("no vector form for %T", m)
	}
	return v
}

// normalize turns JSON's numbers into float64 the way asVector writes them.
func normalize(want map[string]any) map[string]any {
	b, _ := json.Marshal(want)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
