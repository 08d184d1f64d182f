package emqp_test

import (
	"errors"
	"fmt"

	"github.com/eventmq/emq/emqp"
)

// Frames as a DEALER socket sends them (a ROUTER adds the routing id in
// front; strip it before Decode).
func ExampleDecode() {
	frames := [][]byte{[]byte(""), []byte("eMQP/1.0"), []byte("REQUEST"), []byte("msg-1"),
		[]byte("email"), []byte("reply-requested,timeout:30"), []byte(`{"to": "ada@example.com"}`)}
	m, err := emqp.Decode(frames)
	if err != nil {
		fmt.Println(err)
		return
	}
	req := m.(*emqp.Request)
	timeout, err := req.Headers.Timeout()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(req.Command(), req.MsgID, req.Queue, req.Headers.ReplyRequested(), timeout)

	// A refusal names its class and the msgid to answer with ERROR.
	_, err = emqp.Decode(frames[:5])
	var de *emqp.DecodeError
	fmt.Println(errors.Is(err, emqp.ErrFrames), errors.As(err, &de) && de.MsgID == "msg-1")
	fmt.Println(err)
	// Output:
	// REQUEST msg-1 email true 30s
	// true true
	// emqp: REQUEST needs 7 frames, got 5
}

// Headers are read on demand; Set returns a changed copy in the comma
// form EventMQ sends.
func ExampleHeaders() {
	h, err := emqp.ParseHeaders(`{"retry-count": 5, "reply-requested": true}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	retries, err := h.RetryCount(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(retries, h.ReplyRequested())
	fmt.Println(h.Set("timeout", "30"))
	// Output:
	// 5 true
	// retry-count:5,reply-requested,timeout:30
}
