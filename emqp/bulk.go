package emqp

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Bulk is many jobs sent at once (client → broker): stored all in one
// commit and ACKed once under MsgID, or none stored and one ERROR (its
// ref_msgid MsgID) whose text names the first job refused (BulkJobText).
// On the wire each job is 4 frames after the bulk's msgid:
//
//	'' | eMQP/1.0 | BULK | msgid | job msgid | queue | headers | payload | ...
type Bulk struct {
	MsgID string
	Jobs  []BulkJob
}

// BulkJob is one job of a Bulk: the frames of a REQUEST's job.
type BulkJob struct {
	MsgID   string
	Queue   string
	Headers Headers
	Payload []byte
}

// Command returns BULK.
func (*Bulk) Command() Command { return CmdBulk }

// ID returns the bulk's own msgid.
func (m *Bulk) ID() string { return m.MsgID }

// Request returns job i of the bulk as the REQUEST that sends it alone.
func (m *Bulk) Request(i int) *Request {
	j := &m.Jobs[i]
	return &Request{MsgID: j.MsgID, Queue: j.Queue, Headers: j.Headers, Payload: j.Payload}
}

// bulkFrames is how many frames each job of a BULK takes.
const bulkFrames = 4

// decodeBulk reads a BULK's jobs: frames after the bulk's msgid come in
// groups of 4, at least one. Every error about a job names its index
// (from 0) and, when it has one, its msgid.
func decodeBulk(frames [][]byte) (Message, error) {
	id := refID(frames)
	f := frames[4:]
	switch {
	case len(f)%bulkFrames != 0:
		return nil, errorf(ErrFrames, CmdBulk, id, "BULK needs 4 frames for each job (msgid, queue, headers, payload) after its msgid, got %d (%d jobs and %d frames)",
			len(f), len(f)/bulkFrames, len(f)%bulkFrames)
	case len(f) == 0:
		return nil, errorf(ErrFrames, CmdBulk, id, "BULK needs at least one job (4 frames: msgid, queue, headers, payload)")
	}
	m := &Bulk{MsgID: string(frames[3]), Jobs: make([]BulkJob, len(f)/bulkFrames)}
	for i := range m.Jobs {
		jf := f[i*bulkFrames : (i+1)*bulkFrames]
		jobID := ""
		if n := len(jf[0]); n > 0 && n <= MaxIDLen {
			jobID = string(jf[0])
		}
		fail := func(err error) error {
			de := err.(*DecodeError)
			de.Command, de.MsgID = CmdBulk, m.MsgID
			de.Text = "BULK: " + BulkJobText(i, jobID, strings.TrimPrefix(de.Text, "REQUEST: "))
			return de
		}
		if err := checkID(CmdRequest, "", "msgid", jf[0]); err != nil {
			return nil, fail(err)
		}
		if err := checkQueue(CmdRequest, nil, jf[1]); err != nil {
			return nil, fail(err)
		}
		h, err := ParseHeaders(string(jf[2]))
		if err != nil {
			return nil, fail(err)
		}
		m.Jobs[i] = BulkJob{MsgID: jobID, Queue: string(jf[1]), Headers: h, Payload: payload(jf[3])}
	}
	return m, nil
}

// encodeBulk writes a BULK: its msgid, then each job's 4 frames. The
// jobs' text frames share one buffer; the payloads are the jobs' own.
func encodeBulk(m *Bulk) [][]byte {
	n := len(m.MsgID)
	headers := make([]string, len(m.Jobs))
	for i, j := range m.Jobs {
		headers[i] = j.Headers.String()
		n += len(j.MsgID) + len(j.Queue) + len(headers[i])
	}
	buf := make([]byte, 0, n)
	text := func(s string) []byte {
		buf = append(buf, s...)
		return buf[len(buf)-len(s) : len(buf) : len(buf)]
	}
	out := make([][]byte, 0, 4+bulkFrames*len(m.Jobs))
	out = append(out, frameEmpty, frameVersion, cmdFrames[CmdBulk], text(m.MsgID))
	for i, j := range m.Jobs {
		out = append(out, text(j.MsgID), text(j.Queue), text(headers[i]), j.Payload)
	}
	return out
}

// BulkJobText is how an error about one job of a BULK names it: its
// index (from 0) and msgid, then text. The broker's ERROR for a refused
// BULK starts this way (BulkJobOf reads it back); so does a decode
// error's text, after "BULK: ".
func BulkJobText(index int, msgid, text string) string {
	return fmt.Sprintf("job %d (msgid %s): %s", index, strconv.Quote(msgid), text)
}

var bulkJobMark = regexp.MustCompile(`(?:^|: )job ([0-9]+) \(msgid "`)

// BulkJobOf reads which job an ERROR's text about a BULK names
// (BulkJobText), and the text after that.
func BulkJobOf(text string) (index int, msgid, rest string, ok bool) {
	loc := bulkJobMark.FindStringSubmatchIndex(text)
	if loc == nil {
		return 0, "", "", false
	}
	index, err := strconv.Atoi(text[loc[2]:loc[3]])
	if err != nil {
		return 0, "", "", false
	}
	tail := text[loc[1]-1:] // from the opening quote
	q, err := strconv.QuotedPrefix(tail)
	if err != nil {
		return 0, "", "", false
	}
	msgid, _ = strconv.Unquote(q)
	rest, found := strings.CutPrefix(tail[len(q):], "): ")
	if !found {
		return 0, "", "", false
	}
	return index, msgid, rest, true
}
