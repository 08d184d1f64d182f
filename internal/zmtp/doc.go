// Package zmtp is EMQ's ZeroMQ transport: a ROUTER endpoint for the broker
// and a single-connection DEALER for peers, both speaking standard ZMTP 3.0
// with the NULL, PLAIN or CURVE mechanism, so libzmq peers interoperate.
//
// The NULL handshake (greeting, READY with Socket-Type and Identity) is
// github.com/go-zeromq/zmq4's own, run through its public zmq4.Open over a
// net.Conn of ours. PLAIN and CURVE are ours (security.go): zmq4 has no
// CURVE and its PLAIN accepts any password. A server asks its Admit about
// each peer and keeps what the peer proved on the Conn (Auth); under
// CURVE every frame is boxed in a MESSAGE. After the handshake, frames are
// read and written here,
// because zmq4 v0.17.0's socket types, used as they come, let one peer harm
// the others (docs/benchmarks.md has the measurements):
//
//   - A frame header is checked against MaxFrameSize before anything is
//     allocated for its body, during the handshake too (guardConn). An
//     oversize frame closes that connection; zmq4 would make() the announced
//     size, 2^50 bytes panics the process. The peer's last message (the
//     broker's ERROR) goes out before a FIN, and what the peer still sends
//     is read and dropped for up to a second, so no reset destroys it.
//   - Each connection's handshake runs in its own goroutine with a deadline,
//     and a panic in zmq4's metadata parser (a truncated property) is
//     recovered there: one silent or malformed peer delays nobody.
//   - Each connection has its own bounded send queue and writer goroutine:
//     a peer that stops reading fills its own queue, is disconnected, and
//     its queued messages are reported undelivered. Nobody else waits.
//   - A routing id is held by one live connection: the newest takes over
//     and the older one is closed (zmq4 sends to every connection with the
//     id). Send to an id with no live connection returns ErrNoPeer.
//   - Queued messages are written together, a whole batch in one write (or
//     one writev when large bodies are referenced, not copied).
//   - ZMTP PING is answered with PONG, so libzmq peers with ZMTP heartbeats
//     on keep their connection.
//
// Reads go through a 64 KiB bufio.Reader; small frame bodies are carved
// from a shared 4 KiB arena, so a short message costs a few allocations,
// not one per frame.
package zmtp
