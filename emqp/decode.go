package emqp

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decode turns the frames of one message (without the ROUTER routing id)
// into a typed message. Every failure is a *DecodeError.
func Decode(frames [][]byte) (Message, error) {
	if len(frames) < 4 {
		return nil, errorf(ErrFrames, "", "", "a message needs at least 4 frames ('', %s, command, msgid), got %d", Version, len(frames))
	}
	if len(frames[0]) != 0 {
		return nil, errorf(ErrEnvelope, "", "", "frame 0 must be empty, got %d bytes", len(frames[0]))
	}
	if string(frames[1]) != Version {
		return nil, errorf(ErrVersion, "", refID(frames), "frame 1 must be the version %s, got %s", Version, quote(frames[1]))
	}
	cmd, ok := parseCommand(frames[2])
	if !ok {
		return nil, errorf(ErrCommand, "", refID(frames), "unknown command %s", quote(frames[2]))
	}
	if cmd == CmdBulk {
		if err := checkID(cmd, "", "msgid", frames[3]); err != nil {
			return nil, err
		}
		return decodeBulk(frames)
	}
	min, max := frameCounts(cmd)
	if n := len(frames); n < min || n > max {
		if min == max {
			return nil, errorf(ErrFrames, cmd, refID(frames), "%s needs %d frames, got %d", cmd, min, n)
		}
		return nil, errorf(ErrFrames, cmd, refID(frames), "%s needs %d or %d frames, got %d", cmd, min, max, n)
	}
	if err := checkID(cmd, "", "msgid", frames[3]); err != nil {
		return nil, err
	}
	f := frames[4:]
	switch cmd {
	case CmdRequest:
		return decodeRequest(frames[3], f)
	case CmdAck:
		id := string(frames[3])
		if err := checkID(cmd, id, "acked msgid", f[0]); err != nil {
			return nil, err
		}
		return &Ack{MsgID: id, AckedID: string(f[0])}, nil
	case CmdInform:
		id := string(frames[3])
		queues, err := parseQueues(id, f[0])
		if err != nil {
			return nil, err
		}
		m := &Inform{MsgID: id, Queues: queues}
		if len(f) > 1 {
			m.PeerType = string(f[1])
		}
		return m, nil
	case CmdReady:
		return &Ready{MsgID: string(frames[3])}, nil
	case CmdReply:
		m := &Reply{MsgID: string(frames[3]), Payload: payload(f[0])}
		m.OrigMsgID = m.MsgID // the seed form: the reply carries the request's msgid
		if len(f) > 1 {
			if err := checkID(cmd, m.MsgID, "orig msgid", f[1]); err != nil {
				return nil, err
			}
			m.OrigMsgID = string(f[1])
		}
		return m, nil
	case CmdFail:
		id := string(frames[3])
		if err := checkID(cmd, id, "orig msgid", f[0]); err != nil {
			return nil, err
		}
		return &Fail{MsgID: id, OrigMsgID: string(f[0]), Reason: string(f[1])}, nil
	case CmdError:
		return &Error{MsgID: string(frames[3]), RefMsgID: string(f[0]), Code: string(f[1]), Text: string(f[2])}, nil
	case CmdHeartbeat:
		m := &Heartbeat{MsgID: string(frames[3])}
		if len(f) > 0 {
			m.Time = string(f[0])
		}
		return m, nil
	case CmdKbye:
		return &Kbye{MsgID: string(frames[3])}, nil
	case CmdDisconnect:
		return &Disconnect{MsgID: string(frames[3])}, nil
	case CmdSchedule:
		return decodeSchedule(cmd, frames[3], f)
	case CmdUnschedule:
		s, err := decodeSchedule(cmd, frames[3], f)
		if err != nil {
			return nil, err
		}
		return (*Unschedule)(s), nil
	case CmdCancel:
		id := string(frames[3])
		if err := checkID(cmd, id, "orig msgid", f[0]); err != nil {
			return nil, err
		}
		return &Cancel{MsgID: id, OrigMsgID: string(f[0])}, nil
	case CmdProgress:
		id := string(frames[3])
		if err := checkID(cmd, id, "orig msgid", f[0]); err != nil {
			return nil, err
		}
		switch text := f[1]; {
		case len(text) > MaxProgressLen:
			return nil, errorf(ErrProgress, cmd, id, "PROGRESS: the text is %d bytes, over the limit of %d", len(text), MaxProgressLen)
		case !utf8.Valid(text):
			return nil, errorf(ErrProgress, cmd, id, "PROGRESS: the text is not valid UTF-8")
		}
		return &Progress{MsgID: id, OrigMsgID: string(f[0]), Text: string(f[1])}, nil
	case CmdPublish:
		id := string(frames[3])
		if len(f[0]) > MaxTopicLen {
			return nil, errorf(ErrTopic, cmd, id, "PUBLISH: the topic is %d bytes, over the limit of %d", len(f[0]), MaxTopicLen)
		}
		return &Publish{MsgID: id, Topic: string(f[0]), Message: payload(f[1])}, nil
	case CmdRoutes:
		m := &Routes{MsgID: string(frames[3])}
		if len(f) > 0 {
			m.Table = payload(f[0])
		}
		return m, nil
	}
	panic("emqp: command without a decoder: " + cmd) // parseCommand and this switch list the same commands
}

// refID is the refused message's msgid, for the ERROR's ref_msgid, when
// frame 3 can be one. Only a refusal pays for the string.
func refID(frames [][]byte) string {
	if n := len(frames[3]); n > 0 && n <= MaxIDLen {
		return string(frames[3])
	}
	return ""
}

// parseCommand returns the constant for a command frame, without
// allocating.
func parseCommand(b []byte) (Command, bool) {
	switch string(b) {
	case "REQUEST":
		return CmdRequest, true
	case "ACK":
		return CmdAck, true
	case "INFORM":
		return CmdInform, true
	case "READY":
		return CmdReady, true
	case "REPLY":
		return CmdReply, true
	case "FAIL":
		return CmdFail, true
	case "ERROR":
		return CmdError, true
	case "HEARTBEAT":
		return CmdHeartbeat, true
	case "KBYE":
		return CmdKbye, true
	case "DISCONNECT":
		return CmdDisconnect, true
	case "SCHEDULE":
		return CmdSchedule, true
	case "UNSCHEDULE":
		return CmdUnschedule, true
	case "PUBLISH":
		return CmdPublish, true
	case "CANCEL":
		return CmdCancel, true
	case "PROGRESS":
		return CmdProgress, true
	case "ROUTES":
		return CmdRoutes, true
	case "BULK":
		return CmdBulk, true
	}
	return "", false
}

// frameCounts returns the smallest and largest frame count of a command,
// counting the 4 frames every message starts with.
func frameCounts(c Command) (min, max int) {
	switch c {
	case CmdRequest, CmdError:
		return 7, 7
	case CmdAck, CmdCancel:
		return 5, 5
	case CmdInform, CmdReply:
		return 5, 6
	case CmdFail, CmdPublish, CmdProgress:
		return 6, 6
	case CmdHeartbeat, CmdRoutes:
		return 4, 5
	case CmdSchedule, CmdUnschedule:
		return 9, 9
	}
	return 4, 4 // READY, KBYE, DISCONNECT
}

func checkID(cmd Command, msgid, what string, b []byte) error {
	switch {
	case len(b) == 0:
		return errorf(ErrMsgID, cmd, msgid, "%s: the %s is empty", cmd, what)
	case len(b) > MaxIDLen:
		return errorf(ErrMsgID, cmd, msgid, "%s: the %s is %d bytes, over the limit of %d", cmd, what, len(b), MaxIDLen)
	}
	return nil
}

// checkQueue checks a queue name; msgid is converted only for an error.
func checkQueue(cmd Command, msgid, q []byte) error {
	switch {
	case len(q) == 0:
		return errorf(ErrQueue, cmd, string(msgid), "%s: the queue name is empty", cmd)
	case len(q) > MaxQueueLen:
		return errorf(ErrQueue, cmd, string(msgid), "%s: the queue name is %d bytes, over the limit of %d", cmd, len(q), MaxQueueLen)
	case !utf8.Valid(q):
		return errorf(ErrQueue, cmd, string(msgid), "%s: the queue name is not valid UTF-8", cmd)
	}
	return nil
}

// decodeRequest keeps the allocations of the hot path to two: the message
// and one string that holds msgid, queue and headers.
func decodeRequest(id []byte, f [][]byte) (Message, error) {
	q, h := f[0], f[1]
	if err := checkQueue(CmdRequest, id, q); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.Grow(len(id) + len(q) + len(h))
	b.Write(id)
	b.Write(q)
	b.Write(h)
	s := b.String()
	m := &Request{MsgID: s[:len(id)], Queue: s[len(id) : len(id)+len(q)], Payload: payload(f[2])}
	headers, err := ParseHeaders(s[len(id)+len(q):])
	if err != nil {
		return nil, withContext(err, CmdRequest, m.MsgID)
	}
	m.Headers = headers
	return m, nil
}

func decodeSchedule(cmd Command, id []byte, f [][]byte) (*Schedule, error) {
	m := &Schedule{MsgID: string(id), Payload: payload(f[3]), Cron: string(f[4])}
	if err := checkQueue(cmd, id, f[0]); err != nil {
		return nil, err
	}
	m.Queue = string(f[0])
	h, err := ParseHeaders(string(f[1]))
	if err != nil {
		return nil, withContext(err, cmd, m.MsgID)
	}
	m.Headers = h
	n, err := strconv.Atoi(string(f[2]))
	if err != nil || n < CronInterval {
		return nil, errorf(ErrInterval, cmd, m.MsgID, "%s: the interval %s is not a whole number of seconds, or -1 for cron", cmd, quote(f[2]))
	}
	m.Interval = n
	// An UNSCHEDULE names its schedule by payload (EventMQ's client sends
	// -1 and no cron); the broker parses a SCHEDULE's cron expression.
	if n == CronInterval && cmd == CmdSchedule && strings.TrimSpace(m.Cron) == "" {
		return nil, errorf(ErrCron, cmd, m.MsgID, "%s: interval -1 needs a cron expression", cmd)
	}
	return m, nil
}

// parseQueues reads INFORM's queue list: CSV names (weight 10) or JSON
// [[weight, "name"], ...]. An empty frame is an empty list.
func parseQueues(msgid string, b []byte) ([]Queue, error) {
	s := string(b)
	var queues []Queue
	if strings.HasPrefix(strings.TrimSpace(s), "[") {
		var raw [][]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, errorf(ErrQueues, CmdInform, msgid, "INFORM: the queue list is not JSON [[weight, \"name\"], ...]: %v", err)
		}
		for i, pair := range raw {
			var q Queue
			if len(pair) != 2 || json.Unmarshal(pair[0], &q.Weight) != nil || json.Unmarshal(pair[1], &q.Name) != nil {
				return nil, errorf(ErrQueues, CmdInform, msgid, "INFORM: queue %d is not [weight, \"name\"]", i+1)
			}
			if err := checkQueueName(msgid, q.Name); err != nil {
				return nil, err
			}
			queues = append(queues, q)
		}
		return queues, nil
	}
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if err := checkQueueName(msgid, name); err != nil {
			return nil, err
		}
		queues = append(queues, Queue{Weight: DefaultWeight, Name: name})
	}
	return queues, nil
}

func checkQueueName(msgid, name string) error {
	if !ValidQueueName(name) {
		return errorf(ErrQueues, CmdInform, msgid, "INFORM: queue name %s is empty, over %d bytes or not UTF-8", QuoteName(name), MaxQueueLen)
	}
	return nil
}

// ValidQueueName reports whether name can name a queue: 1 to MaxQueueLen
// bytes of UTF-8.
func ValidQueueName(name string) bool {
	return name != "" && len(name) <= MaxQueueLen && utf8.ValidString(name)
}

// withContext adds the command and msgid to a headers error.
func withContext(err error, cmd Command, msgid string) error {
	if de, ok := err.(*DecodeError); ok {
		de.Command, de.MsgID = cmd, msgid
		de.Text = string(cmd) + ": " + de.Text
	}
	return err
}

// payload returns the frame itself, or nil for an empty one, so that a
// decoded message has one form for "no payload".
func payload(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// quote shows a frame in an error text: quoted, and cut when long.
func quote(b []byte) string {
	const max = 32
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

// MaxQuoted is how much of a name or value an error text echoes.
const MaxQuoted = 64

// QuoteName shows a name or value in an error text: quoted, and when it
// is over MaxQuoted bytes its start, then "… (N bytes)", so that a
// 70,000-byte name makes a short refusal.
func QuoteName(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	n := MaxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// ReadMessage reads messages with read until one decodes; each that does
// not is passed to bad (which may be nil) and skipped. It returns read's
// error, which ends the stream.
func ReadMessage(read func() ([][]byte, error), bad func(error)) (Message, error) {
	for {
		frames, err := read()
		if err != nil {
			return nil, err
		}
		m, err := Decode(frames)
		if err == nil {
			return m, nil
		}
		if bad != nil {
			bad(err)
		}
	}
}
