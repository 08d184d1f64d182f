// Package emqp is the eMQP/1.0 wire format: ZeroMQ multipart frames to typed
// messages and back. It is pure: no sockets, no goroutines, no state.
//
// Every message is a list of frames:
//
//	'' | eMQP/1.0 | COMMAND | msgid | command-specific frames...
//
// (A ROUTER socket adds the peer's routing id in front on receive; callers
// strip it before Decode and add it after Encode.)
//
// Decode accepts every historical form DESIGN.md lists (CSV or JSON INFORM
// queues, 5- or 6-frame REPLY, HEARTBEAT with or without its time, CSV or
// JSON headers); Encode always writes the richest form. Decode(Encode(m))
// gives m back.
//
// Every decode failure is a *DecodeError whose Class (ErrFrames,
// ErrVersion, ...) can be matched with errors.Is; its text is meant for a
// person ("REQUEST needs 7 frames, got 5").
//
// Memory: Decode does not copy payloads. A decoded message's Payload refers
// to the frame it came from, so the caller must not reuse those frames'
// memory while the message is in use. Encode returns frames that share the
// package's constant frames (the empty envelope, the version, the command
// names) and the message's payload: treat them as read-only.
package emqp
