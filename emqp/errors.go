package emqp

import "fmt"

// Class names the kind of protocol error a DecodeError is. Each class is
// also an error value, so errors.Is(err, ErrFrames) tells the class.
type Class string

// The classes of decode error.
const (
	ErrFrames   Class = "frames"   // wrong number of frames for the command
	ErrEnvelope Class = "envelope" // frame 0 is not empty
	ErrVersion  Class = "version"  // frame 1 is not eMQP/1.0
	ErrCommand  Class = "command"  // unknown command
	ErrMsgID    Class = "msgid"    // a message id is empty or over MaxIDLen bytes
	ErrQueue    Class = "queue"    // a queue name is empty or over MaxQueueLen bytes
	ErrQueues   Class = "queues"   // INFORM's queue list cannot be read
	ErrTopic    Class = "topic"    // a PUBLISH topic is over MaxTopicLen bytes
	ErrHeaders  Class = "headers"  // the headers frame cannot be read
	ErrInterval Class = "interval" // SCHEDULE's interval is not a whole number >= -1
	ErrCron     Class = "cron"     // SCHEDULE's cron expression is missing or malformed
	ErrProgress Class = "progress" // a PROGRESS text is over MaxProgressLen bytes or not UTF-8
)

// Error returns the class name.
func (c Class) Error() string { return string(c) }

// DecodeError is a protocol error found while decoding a message.
type DecodeError struct {
	Class   Class   // what kind of error
	Command Command // the command, when frame 2 was readable
	MsgID   string  // the message id, when frame 3 was readable (for ERROR's ref_msgid)
	Text    string  // one sentence a person understands
}

func (e *DecodeError) Error() string { return "emqp: " + e.Text }

// Unwrap returns the class, so errors.Is(err, ErrFrames) works.
func (e *DecodeError) Unwrap() error { return e.Class }

func errorf(class Class, cmd Command, msgid string, format string, args ...any) *DecodeError {
	return &DecodeError{Class: class, Command: cmd, MsgID: msgid, Text: fmt.Sprintf(format, args...)}
}
