package emqp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/eventmq/emq/emqp"
)

// joinFrames packs frames into one fuzz input: a 2-byte length before each.
func joinFrames(frames [][]byte) []byte {
	var b bytes.Buffer
	for _, f := range frames {
		_ = binary.Write(&b, binary.BigEndian, uint16(len(f)))
		b.Write(f)
	}
	return b.Bytes()
}

func splitFrames(data []byte) [][]byte {
	var frames [][]byte
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		frames = append(frames, data[:n])
		data = data[n:]
	}
	return frames
}

// FuzzDecode: Decode never panics, fails only with a *DecodeError, and
// whatever decodes re-encodes to frames that decode to the same message.
func FuzzDecode(f *testing.F) {
	for _, c := range loadVectors(f) {
		f.Add(joinFrames(c.frames(f)))
	}
	f.Add(joinFrames(emqp.Encode(&emqp.Request{MsgID: "m", Queue: "q", Headers: emqp.HeadersFrom(emqp.Header{Name: "n", Value: "a,b"}), Payload: []byte{0, 0xff}})))
	f.Add(joinFrames(emqp.Encode(&emqp.Bulk{MsgID: "b", Jobs: []emqp.BulkJob{
		{MsgID: "j\"1", Queue: "q", Headers: emqp.HeadersFrom(emqp.Header{Name: "unique", Value: "k"}), Payload: []byte{0, 0xff}},
		{MsgID: "j2", Queue: "r"},
	}})))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := emqp.Decode(splitFrames(data))
		if err != nil {
			var de *emqp.DecodeError
			if !errors.As(err, &de) || de.Class == "" || de.Text == "" {
				t.Fatalf("error %v is not a classified *DecodeError", err)
			}
			if de.Command == emqp.CmdBulk && de.Class != emqp.ErrFrames && de.MsgID != "" {
				if _, _, _, ok := emqp.BulkJobOf(de.Text); !ok { // a job's error names the job
					t.Fatalf("BULK error %q does not name its job", de.Text)
				}
			}
			return
		}
		again, err := emqp.Decode(emqp.Encode(m))
		if err != nil {
			t.Fatalf("%#v re-encoded does not decode: %v", m, err)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip changed the message:\n got %#v\nwant %#v", again, m)
		}
	})
}

// FuzzHeaders: parsing never panics, and parsed headers read back the same.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{"", "reply-requested,timeout:10", " a , ,b:c:d,", `{"a": 1, "b": "x,y", "c": true}`, `{"a": [1]}`, ":x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := emqp.ParseHeaders(s)
		if err != nil {
			if !errors.Is(err, emqp.ErrHeaders) {
				t.Fatalf("error %v is not a headers error", err)
			}
			return
		}
		again, err := emqp.ParseHeaders(h.String())
		if err != nil {
			t.Fatalf("%q does not parse again: %v", h, err)
		}
		if !reflect.DeepEqual(again.Map(), h.Map()) {
			t.Fatalf("%q reads back as %v, want %v", h, again.Map(), h.Map())
		}
		if !reflect.DeepEqual(emqp.HeadersFrom(h.Items()...).Map(), h.Map()) {
			t.Fatalf("HeadersFrom(Items) of %q changed the items", h)
		}
	})
}

// FuzzJobControls: CANCEL and PROGRESS frames of any content decode to a
// message that round-trips, or to a classified error; a progress text's
// percent and note never panic, the percent is from 0 to 100, and the
// job headers' readers refuse what they refuse by name.
func FuzzJobControls(f *testing.F) {
	f.Add("CANCEL", "m", "job", "", "priority:5")
	f.Add("PROGRESS", "m", "job", "40 copied 4 of 10", "unique:k,unique-for:60")
	f.Add("PROGRESS", "m", "", "101", "priority:-3")
	f.Add("PROGRESS", "m", "job", "\xff", `{"unique": "a,b"}`)
	f.Fuzz(func(t *testing.T, cmd, id, orig, text, headers string) {
		frames := [][]byte{{}, []byte(emqp.Version), []byte(cmd), []byte(id), []byte(orig)}
		if cmd != "CANCEL" {
			frames = append(frames, []byte(text))
		}
		m, err := emqp.Decode(frames)
		if err != nil {
			var de *emqp.DecodeError
			if !errors.As(err, &de) || de.Class == "" || de.Text == "" {
				t.Fatalf("error %v is not a classified *DecodeError", err)
			}
		} else if again, err := emqp.Decode(emqp.Encode(m)); err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("%#v round trip: %#v, %v", m, again, err)
		}
		p := &emqp.Progress{Text: text}
		if n, ok := p.Percent(); ok && (n < 0 || n > 100) {
			t.Fatalf("percent %d of %q", n, text)
		}
		_ = p.Note()
		h, err := emqp.ParseHeaders(headers)
		if err != nil {
			return
		}
		if _, err := h.Priority(); err != nil && !strings.Contains(err.Error(), "header priority") {
			t.Fatalf("priority error %v does not name the header", err)
		}
		if key, _, err := h.Unique(); err != nil && !strings.Contains(err.Error(), "header unique") || len(key) > emqp.MaxUniqueLen {
			t.Fatalf("unique: %q, %v", key, err)
		}
	})
}
