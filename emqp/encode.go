package emqp

import (
	"encoding/json"
	"strconv"
)

// Constant frames, shared by every encoded message: read-only.
var (
	frameEmpty   = []byte{}
	frameVersion = []byte(Version)
	cmdFrames    = map[Command][]byte{}
)

func init() {
	for _, c := range []Command{CmdRequest, CmdAck, CmdInform, CmdReady, CmdReply, CmdFail,
		CmdError, CmdHeartbeat, CmdKbye, CmdDisconnect, CmdSchedule, CmdUnschedule, CmdPublish, CmdCancel, CmdProgress, CmdRoutes, CmdBulk} {
		cmdFrames[c] = []byte(c)
	}
}

// Encode returns the frames of m (without a routing id), in the richest
// form: INFORM with JSON queues and its type frame, REPLY with 6 frames.
// The frames share m's payload and the package's constant frames.
func Encode(m Message) [][]byte {
	switch m := m.(type) {
	case *Request:
		return frames(CmdRequest, 3, m.Payload, m.MsgID, m.Queue, m.Headers.String())
	case *Ack:
		return frames(CmdAck, -1, nil, m.MsgID, m.AckedID)
	case *Inform:
		return frames(CmdInform, -1, nil, m.MsgID, queuesJSON(m.Queues), m.PeerType)
	case *Ready:
		return frames(CmdReady, -1, nil, m.MsgID)
	case *Reply:
		return frames(CmdReply, 1, m.Payload, m.MsgID, m.OrigMsgID)
	case *Fail:
		return frames(CmdFail, -1, nil, m.MsgID, m.OrigMsgID, m.Reason)
	case *Error:
		return frames(CmdError, -1, nil, m.MsgID, m.RefMsgID, m.Code, m.Text)
	case *Heartbeat:
		return frames(CmdHeartbeat, -1, nil, m.MsgID, m.Time)
	case *Kbye:
		return frames(CmdKbye, -1, nil, m.MsgID)
	case *Disconnect:
		return frames(CmdDisconnect, -1, nil, m.MsgID)
	case *Schedule:
		return encodeSchedule(CmdSchedule, m)
	case *Unschedule:
		return encodeSchedule(CmdUnschedule, (*Schedule)(m))
	case *Publish:
		return frames(CmdPublish, 2, m.Message, m.MsgID, m.Topic)
	case *Cancel:
		return frames(CmdCancel, -1, nil, m.MsgID, m.OrigMsgID)
	case *Progress:
		return frames(CmdProgress, -1, nil, m.MsgID, m.OrigMsgID, m.Text)
	case *Bulk:
		return encodeBulk(m)
	case *Routes:
		if len(m.Table) == 0 {
			return frames(CmdRoutes, -1, nil, m.MsgID)
		}
		return frames(CmdRoutes, 1, m.Table, m.MsgID)
	}
	panic("emqp: Encode of an unknown message type")
}

func encodeSchedule(cmd Command, m *Schedule) [][]byte {
	return frames(cmd, 4, m.Payload, m.MsgID, m.Queue, m.Headers.String(), strconv.Itoa(m.Interval), m.Cron)
}

// frames builds a message from the command and its text fields, copying
// all the text into one buffer; the payload, if at >= 0, is put in at that
// index of the fields.
func frames(cmd Command, at int, payload []byte, fields ...string) [][]byte {
	n := 0
	for _, f := range fields {
		n += len(f)
	}
	buf := make([]byte, 0, n)
	out := make([][]byte, 3, 4+len(fields))
	out[0], out[1], out[2] = frameEmpty, frameVersion, cmdFrames[cmd]
	for i, f := range fields {
		if i == at {
			out = append(out, payload)
		}
		buf = append(buf, f...)
		out = append(out, buf[len(buf)-len(f):len(buf):len(buf)])
	}
	if at == len(fields) {
		out = append(out, payload)
	}
	return out
}

func queuesJSON(qs []Queue) string {
	pairs := make([][2]any, len(qs))
	for i, q := range qs {
		pairs[i] = [2]any{q.Weight, q.Name}
	}
	b, _ := json.Marshal(pairs) // ints and strings always marshal
	return string(b)
}
