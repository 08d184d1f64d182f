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
// Beside DESIGN.md's commands, EMQ's own (their wire cases are in
// testdata/vectors-ext.json):
//
//	CANCEL   msgid job_msgid          client → broker: cancel that job (ACK, or
//	                                  ERROR not_found / conflict); broker → the
//	                                  worker running it: stop, no answer
//	PROGRESS msgid job_msgid text     worker → broker: "40", "40 note" or "note",
//	                                  at most MaxProgressLen bytes of UTF-8
//	BULK     msgid (job_msgid queue headers payload)...
//	                                  client → broker: one or more jobs, each the
//	                                  frames of a REQUEST's job; all stored in
//	                                  one commit and one ACK (acked_msgid: the
//	                                  bulk's msgid), or none and one ERROR (its
//	                                  ref_msgid the bulk's) whose text starts
//	                                  with the first job refused, "job INDEX
//	                                  (msgid "ID"): " (BulkJobText, BulkJobOf;
//	                                  indices from 0), with the code its REQUEST
//	                                  would have got
//
// and the REQUEST headers priority:N (0-65535, lower first, 1024 without),
// unique:KEY (at most 255 bytes) and unique-for:SECONDS, read by
// Headers.Priority and Headers.Unique; a unique key held by another job is
// refused with ERROR duplicate, its text ending "is held by job MSGID".
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
