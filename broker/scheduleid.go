package broker

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/eventmq/emq/emqp"
)

// scheduleID names the schedule a SCHEDULE or UNSCHEDULE is about:
//
//  1. its header schedule-id:NAME, if it has one;
//  2. for an EventMQ payload ["run", {...}], what EventMQ's scheduler
//     computes (schedule_hash in its scheduler.py): the SHA-1, in hex, of
//     Python's json.dumps(..., sort_keys=True) of the run object's args,
//     kwargs, class_args, class_kwargs, path and callable. So an original
//     client's schedule() sent twice is one schedule, and its
//     unschedule() finds it;
//  3. else the SHA-1 of the queue name and the payload.
func scheduleID(queue string, headers emqp.Headers, payload []byte) string {
	if id, ok := headers.Get(emqp.HeaderScheduleID); ok && id != "" {
		return id
	}
	if id, ok := eventMQHash(payload); ok {
		return id
	}
	h := sha1.New()
	h.Write([]byte(queue))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

// eventMQHash is EventMQ's schedule_hash of a ["run", {...}] payload.
func eventMQHash(payload []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var msg []any
	if dec.Decode(&msg) != nil || len(msg) != 2 || msg[0] != "run" {
		return "", false
	}
	run, ok := msg[1].(map[string]any)
	if !ok {
		return "", false
	}
	picked := map[string]any{}
	for _, k := range []string{"args", "kwargs", "class_args", "class_kwargs", "path", "callable"} {
		picked[k] = run[k] // missing: null (EventMQ's scheduler would fail)
	}
	var b strings.Builder
	pyJSON(&b, picked)
	sum := sha1.Sum([]byte(b.String()))
	return hex.EncodeToString(sum[:]), true
}

// pyJSON writes v as Python's json.dumps(v, sort_keys=True) does: ", "
// and ": " between items, keys sorted, everything outside printable ASCII
// escaped as \uXXXX, numbers as Python prints them.
func pyJSON(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		b.WriteString(pyNumber(v))
	case string:
		pyString(b, v)
	case []any:
		b.WriteByte('[')
		for i, it := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			pyJSON(b, it)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // UTF-8 byte order is code point order, as Python's
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyString(b, k)
			b.WriteString(": ")
			pyJSON(b, v[k])
		}
		b.WriteByte('}')
	}
}

func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= 0x20 && r <= 0x7e:
			b.WriteRune(r)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(b, `\u%04x\u%04x`, hi, lo)
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
}

// pyNumber writes a JSON number as Python reads and prints it: an integer
// as an int, anything else as repr(float).
func pyNumber(n json.Number) string {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		return pyInt(s)
	}
	f, err := n.Float64()
	if err != nil {
		return s
	}
	// Shortest digits and decimal exponent, then Python's repr layout:
	// plain from 1e-4 up to 1e16, else d.ddde±XX.
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, expPart, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expPart)
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// pyInt prints a JSON integer of any size as Python's int() does:
// without leading zeros, and 0 for -0.
func pyInt(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(strings.TrimPrefix(s, "-"), "0")
	switch {
	case s == "":
		return "0"
	case neg:
		return "-" + s
	}
	return s
}
