package emqp

import (
	"bufio"
	"crypto/rand"
	"io"
	"sync"

	"github.com/google/uuid"
)

// Version is the protocol version frame.
const Version = "eMQP/1.0"

// Limits on ids and names, in bytes.
const (
	MaxIDLen    = 255
	MaxQueueLen = 255
	// MaxTopicLen bounds a PUBLISH topic; an empty topic is allowed.
	MaxTopicLen = 1024
)

// Command is a message's command frame.
type Command string

// The commands of eMQP/1.0 and EMQ's extensions (FAIL, ERROR).
const (
	CmdRequest    Command = "REQUEST"
	CmdAck        Command = "ACK"
	CmdInform     Command = "INFORM"
	CmdReady      Command = "READY"
	CmdReply      Command = "REPLY"
	CmdFail       Command = "FAIL"
	CmdError      Command = "ERROR"
	CmdHeartbeat  Command = "HEARTBEAT"
	CmdKbye       Command = "KBYE"
	CmdDisconnect Command = "DISCONNECT"
	CmdSchedule   Command = "SCHEDULE"
	CmdUnschedule Command = "UNSCHEDULE"
	CmdPublish    Command = "PUBLISH"
	CmdCancel     Command = "CANCEL"   // client → broker: cancel a job; broker → worker: stop running it
	CmdProgress   Command = "PROGRESS" // worker → broker: how far a job has come
	CmdRoutes     Command = "ROUTES"   // peer → broker: which shard serves which queue; broker → peer: the table
	CmdBulk       Command = "BULK"     // client → broker: many jobs, stored all or none, one ACK
)

// Peer types an INFORM may name.
const (
	PeerWorker    = "worker"
	PeerScheduler = "scheduler"
)

// Error codes the broker sends in ERROR messages.
const (
	CodeBadRequest         = "bad_request"
	CodeUnsupportedVersion = "unsupported_version"
	CodeUnknownCommand     = "unknown_command"
	CodeTooLarge           = "too_large"
	CodeQueueFull          = "queue_full"
	CodeUnavailable        = "unavailable"
	CodeForbidden          = "forbidden" // the peer's roles do not allow the command (CURVE, PLAIN)
	// CodeDuplicate refuses a REQUEST whose unique key another job holds;
	// the text ends with "held by job MSGID" (DuplicateHolder reads it).
	CodeDuplicate = "duplicate"
	CodeNotFound  = "not_found" // CANCEL of a job the broker does not hold
	CodeConflict  = "conflict"  // CANCEL of a job that is done, dead or cancelled already
	// CodeMoved refuses a REQUEST or SCHEDULE for a queue another shard
	// serves; the text names the shard, its endpoints and the placement's
	// version (MovedText, ParseMoved).
	CodeMoved = "moved"
)

// MaxProgressLen bounds the text of a PROGRESS, in bytes.
const MaxProgressLen = 1024

// Message is one decoded eMQP message.
type Message interface {
	// Command is the message's command frame.
	Command() Command
	// ID is the message's own msgid (frame 3).
	ID() string
}

// NewID returns a new message id: a UUIDv7 string, so ids made later sort
// after ids made earlier (the journal relies on that for fast appends).
func NewID() string {
	return uuid.Must(uuid.NewV7FromReader(idRand)).String()
}

// idRand is crypto/rand read 4 KiB at a time, for 256 ids: read per id,
// it cost a visible share of emq bench's CPU, most of it stack growth for
// vgetrandom in short-lived goroutines (docs/benchmarks.md has the figure).
var idRand = &lockedReader{r: bufio.NewReaderSize(rand.Reader, 4096)}

type lockedReader struct {
	mu sync.Mutex
	r  *bufio.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return io.ReadFull(l.r, p)
}

// Request is a job: client → broker, and broker → worker with the client's
// msgid kept.
type Request struct {
	MsgID   string
	Queue   string
	Headers Headers
	Payload []byte
}

// Ack confirms a REQUEST (once it is durable) or an INFORM.
type Ack struct {
	MsgID   string
	AckedID string // the msgid being acknowledged
}

// Queue is one queue a worker serves, with its weight (higher first).
type Queue struct {
	Weight int
	Name   string
}

// DefaultWeight is the weight of a queue named in INFORM's CSV form.
const DefaultWeight = 10

// Inform announces a worker (or scheduler) and the queues it serves.
type Inform struct {
	MsgID    string
	Queues   []Queue
	PeerType string // PeerWorker, PeerScheduler, or "" when the sender gave none
}

// Ready offers one free job slot.
type Ready struct {
	MsgID string
}

// Reply is a job's result: worker → broker, and broker → client.
type Reply struct {
	MsgID     string
	Payload   []byte
	OrigMsgID string // the REQUEST's msgid
}

// Fail reports that a job failed; the broker may retry it.
type Fail struct {
	MsgID     string
	OrigMsgID string // the REQUEST's msgid
	Reason    string
}

// Error refuses a message: a machine code (Code*) and one readable sentence.
type Error struct {
	MsgID    string
	RefMsgID string // the refused message's msgid, or "" when unknown
	Code     string
	Text     string
}

// Heartbeat keeps a peer alive; Time is unix time as a decimal string, or "".
type Heartbeat struct {
	MsgID string
	Time  string
}

// Kbye is a graceful goodbye.
type Kbye struct {
	MsgID string
}

// Disconnect is treated like Kbye; it never shuts the broker down.
type Disconnect struct {
	MsgID string
}

// CronInterval is the Interval of a schedule driven by its Cron expression.
const CronInterval = -1

// Schedule asks for a job to be enqueued every Interval seconds, or by Cron
// when Interval is CronInterval.
type Schedule struct {
	MsgID    string
	Queue    string
	Headers  Headers
	Interval int
	Payload  []byte
	Cron     string
}

// Unschedule removes a schedule; its frames are those of Schedule.
type Unschedule Schedule

// Publish is a message for the subscribers of its topic: fanned out as
// the two frames [Topic, Message], not stored, not acknowledged.
type Publish struct {
	MsgID   string
	Topic   string
	Message []byte
}

// Cancel asks for a job to be cancelled (client → broker, answered with
// ACK or ERROR), or tells the worker running it to stop (broker → worker,
// not answered).
type Cancel struct {
	MsgID     string
	OrigMsgID string // the job's msgid
}

// Progress reports how far a job has come: worker → broker. Text is a
// number from 0 to 100, a short note, or both ("40 copied 4 of 10 files").
type Progress struct {
	MsgID     string
	OrigMsgID string // the job's msgid
	Text      string
}

// Percent returns the number the text starts with, if it starts with one
// from 0 to 100.
func (m *Progress) Percent() (int, bool) {
	p, _, ok := splitProgress(m.Text)
	return p, ok
}

// Note returns the text after the number, or the whole text without one.
func (m *Progress) Note() string {
	_, note, _ := splitProgress(m.Text)
	return note
}

// Routes asks a broker where queues are served (peer → broker: Table
// empty) or answers (broker → peer: Table is a RouteTable in JSON; "{}"
// from a broker that is not one shard of several).
type Routes struct {
	MsgID string
	Table []byte
}

// Command returns ROUTES.
func (*Routes) Command() Command { return CmdRoutes }

// ID returns the msgid.
func (m *Routes) ID() string { return m.MsgID }

// Command returns CANCEL.
func (*Cancel) Command() Command { return CmdCancel }

// Command returns PROGRESS.
func (*Progress) Command() Command { return CmdProgress }

// ID returns the msgid.
func (m *Cancel) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Progress) ID() string { return m.MsgID }

// Command returns REQUEST.
func (*Request) Command() Command { return CmdRequest }

// Command returns ACK.
func (*Ack) Command() Command { return CmdAck }

// Command returns INFORM.
func (*Inform) Command() Command { return CmdInform }

// Command returns READY.
func (*Ready) Command() Command { return CmdReady }

// Command returns REPLY.
func (*Reply) Command() Command { return CmdReply }

// Command returns FAIL.
func (*Fail) Command() Command { return CmdFail }

// Command returns ERROR.
func (*Error) Command() Command { return CmdError }

// Command returns HEARTBEAT.
func (*Heartbeat) Command() Command { return CmdHeartbeat }

// Command returns KBYE.
func (*Kbye) Command() Command { return CmdKbye }

// Command returns DISCONNECT.
func (*Disconnect) Command() Command { return CmdDisconnect }

// Command returns SCHEDULE.
func (*Schedule) Command() Command { return CmdSchedule }

// Command returns UNSCHEDULE.
func (*Unschedule) Command() Command { return CmdUnschedule }

// Command returns PUBLISH.
func (*Publish) Command() Command { return CmdPublish }

// ID returns the msgid.
func (m *Request) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Publish) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Ack) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Inform) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Ready) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Reply) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Fail) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Error) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Heartbeat) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Kbye) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Disconnect) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Schedule) ID() string { return m.MsgID }

// ID returns the msgid.
func (m *Unschedule) ID() string { return m.MsgID }
