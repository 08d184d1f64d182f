package emqp_test

import (
	"testing"

	"github.com/eventmq/emq/emqp"
)

func benchRequest() *emqp.Request {
	h, _ := emqp.ParseHeaders("reply-requested,timeout:30,retry-count:3")
	return &emqp.Request{MsgID: emqp.NewID(), Queue: "default", Headers: h, Payload: make([]byte, 100)}
}

func BenchmarkDecodeRequest(b *testing.B) {
	frames := emqp.Encode(benchRequest())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := emqp.Decode(frames); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeRequest(b *testing.B) {
	m := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		_ = emqp.Encode(m)
	}
}

// BenchmarkDecodeRequestHeaders adds what the broker does next with a
// request: read its timeout, retry count and reply flag.
func BenchmarkDecodeRequestHeaders(b *testing.B) {
	frames := emqp.Encode(benchRequest())
	b.ReportAllocs()
	for b.Loop() {
		m, _ := emqp.Decode(frames)
		h := m.(*emqp.Request).Headers
		_, _ = h.Timeout()
		_, _ = h.RetryCount(3)
		_ = h.ReplyRequested()
	}
}

func BenchmarkNewID(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = emqp.NewID()
		}
	})
}

// docs/benchmarks.md says a REQUEST decodes with two allocations (the message,
// and one string for msgid, queue and headers); this keeps it true.
func TestDecodeRequestAllocations(t *testing.T) { // not parallel: it counts every allocation of the process
	frames := emqp.Encode(benchRequest())
	if n := testing.AllocsPerRun(100, func() { _, _ = emqp.Decode(frames) }); n > 2 {
		t.Fatalf("decoding a REQUEST allocates %v times, want 2", n)
	}
}
