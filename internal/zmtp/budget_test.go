package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
)

// heldInbox keeps every message's frames, and its hold on the budget,
// until the test releases them.
type heldInbox struct {
	mu   sync.Mutex
	msgs [][][]byte
	held []Held
	got  chan struct{}
}

func (in *heldInbox) receive(_ string, frames [][]byte, held Held) {
	in.mu.Lock()
	in.msgs, in.held = append(in.msgs, frames), append(in.held, held)
	in.mu.Unlock()
	in.got <- struct{}{}
}

// Messages held by their receiver count against the budget: a sender
// whose frame does not fit waits, unread, until one is released; a
// frame larger than the budget can ever hold is refused; small frames do
// not wait behind large ones.
func TestBudgetHoldsWhatIsReceived(t *testing.T) {
	t.Parallel()
	budget := NewBudget(8 << 20) // 7 MiB for large frames
	in := &heldInbox{got: make(chan struct{}, 16)}
	r, err := Listen("tcp://127.0.0.1:0", Options{Receive: in.receive, Budget: budget, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	big := bytes.Repeat([]byte{7}, 3<<20)
	for _, id := range []string{"a", "b", "c"} {
		c := dial(t, r, id)
		if err := c.WriteMsgs([][]byte{[]byte(id), big}); err != nil {
			t.Fatal(err)
		}
	}
	<-in.got
	<-in.got // two fit, the third waits
	small := dial(t, r, "small")
	if err := small.WriteMsgs([][]byte{[]byte("small"), make([]byte, 1000)}); err != nil {
		t.Fatal(err)
	}
	<-in.got // not behind the waiting large one
	in.mu.Lock()
	if n, used := len(in.msgs), budget.Used(); n != 3 || used != 6<<20+1000 {
		t.Fatalf("%d messages holding %d bytes; want the two large ones and the small one, 6 MiB + 1000", n, used)
	}
	budget.Release(in.held[0])
	in.mu.Unlock()
	<-in.got // the third, now that there is room
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.msgs) != 4 || !bytes.Equal(in.msgs[3][1], big) {
		t.Fatalf("%d messages; the last should be the waiting large one", len(in.msgs))
	}

	tooBig := dial(t, r, "too-big")
	// The router hangs up after the header: the write may fail part way.
	_ = tooBig.WriteMsgs([][]byte{make([]byte, 7<<20+1)})
	if _, err := tooBig.ReadMsg(); err == nil {
		t.Fatal("a frame larger than the budget can hold was taken")
	}
}

// A connection whose queue holds more than SendQueueBytes is dropped as
// slow; a single message larger than that is still taken into an empty
// queue.
func TestSendQueueBytes(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{SendQueueBytes: 1 << 20})
	c := dial(t, r, "reader")
	waitConnected(t, r, "reader")
	if err := r.Send("reader", [][]byte{make([]byte, 2<<20)}); err != nil {
		t.Fatalf("one message over the bound into an empty queue: %v", err)
	}
	if _, err := c.ReadMsg(); err != nil {
		t.Fatal(err)
	}
	// A peer that does not read: the queue grows until the bound.
	dial(t, r, "sleeper")
	waitConnected(t, r, "sleeper")
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = r.Send("sleeper", [][]byte{make([]byte, 256<<10)})
	}
	if err != ErrSlowPeer {
		t.Fatalf("sending 256 MiB to a peer that does not read: %v, want ErrSlowPeer", err)
	}
}

// A message whose frames together could never fit in the budget is
// refused as too large (each frame alone would fit), and its room goes
// back at once: an honest peer's large frame is read.
func TestBudgetRefusesAMessageThatCannotFit(t *testing.T) {
	t.Parallel()
	budget := NewBudget(1 << 20) // 896 KiB for large frames
	in := &heldInbox{got: make(chan struct{}, 16)}
	refused := make(chan error, 4)
	r, err := Listen("tcp://127.0.0.1:0", Options{Receive: func(id string, f [][]byte, h Held) {
		budget.Release(h)
		in.receive(id, f, h)
	}, Refused: func(_ string, err error) [][]byte { refused <- err; return nil }, Budget: budget, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c := dial(t, r, "two-large")
	_ = c.WriteMsgs([][]byte{make([]byte, 500_000), make([]byte, 500_000)})
	if _, err := c.ReadMsg(); err == nil {
		t.Fatal("a 1,000,000-byte message was taken into a budget of 896 KiB for large frames")
	}
	var tl *TooLargeError
	if err := <-refused; !errors.As(err, &tl) || !tl.Budget || tl.Size != 500_000 || len(tl.Frames) != 1 {
		t.Fatalf("refused with %v, want a TooLargeError of the budget for the second frame", err)
	}
	d := dial(t, r, "honest")
	if err := d.WriteMsgs([][]byte{make([]byte, 600_000)}); err != nil {
		t.Fatal(err)
	}
	<-in.got
	if used := budget.Used(); used != 0 {
		t.Fatalf("budget holds %d bytes after every message was released", used)
	}
}

// Two connections each holding the first large frame of a message and
// waiting for room for the second, which only the other could give: a
// waiter holding room waits at most minGrace, then is dropped and its
// room goes back, so the other can go on (or is dropped too): nothing is
// held for ever.
func TestBudgetWaitWhileHoldingEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the budget's grace (10 s): make test runs it")
	}
	t.Parallel()
	budget := NewBudget(1 << 20)
	refused := make(chan error, 4)
	r, err := Listen("tcp://127.0.0.1:0", Options{Receive: func(_ string, _ [][]byte, h Held) { budget.Release(h) },
		Refused: func(_ string, err error) [][]byte { refused <- err; return nil }, Budget: budget, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	frame := func(more bool, n int) []byte {
		flags := byte(flagLong)
		if more {
			flags |= flagMore
		}
		return append(binary.BigEndian.AppendUint64([]byte{flags}, uint64(n)), make([]byte, n)...)
	}
	var ncs []net.Conn
	for _, id := range []string{"a", "b"} {
		nc := rawConn(t, r)
		ncs = append(ncs, nc)
		if _, err := nc.Write(append(rawHandshake(id), frame(true, 400_000)...)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "both first frames' 800,000 bytes in the budget", func() bool { return budget.Used() == 800_000 })
	for _, nc := range ncs {
		go nc.Write(frame(false, 200_000)) // does not fit beside the other's
	}
	testutil.EventuallyWithin(t, minGrace+5*time.Second, "the budget empty once the readers wait for each other", func() bool {
		return budget.Used() == 0
	})
	var nr *NoRoomError // the refusal names the message: its first frame
	if err := <-refused; !errors.As(err, &nr) || !errors.Is(err, ErrNoRoom) || len(nr.Frames) != 1 {
		t.Fatalf("refused with %v, want ErrNoRoom with the frame read before", err)
	}
}

// BenchmarkBudgetUncontended: one reservation and its release, as each
// REQUEST with a payload over the arena's size makes, with nobody waiting.
//
//	go test -run '^$' -bench BudgetUncontended -benchmem ./internal/zmtp/
func BenchmarkBudgetUncontended(b *testing.B) {
	bg := NewBudget(1 << 30)
	for range b.N {
		bg.acquire(4096, nil, nil)
		var h Held
		h.add(4096)
		bg.Release(h)
	}
}

// A message of many frames (a BULK) is taken up to Options.MaxFrames;
// its small frames past MaxFrames are counted in the budget, so many
// small frames cannot hold memory the budget does not see; one frame
// more is refused with a TooManyFramesError naming the frames read.
func TestManyFramesCountInTheBudget(t *testing.T) {
	t.Parallel()
	budget := NewBudget(8 << 20)
	in := &heldInbox{got: make(chan struct{}, 16)}
	refused := make(chan error, 4)
	const most = 1000
	r, err := Listen("tcp://127.0.0.1:0", Options{Receive: in.receive, MaxFrames: most,
		Refused: func(_ string, err error) [][]byte { refused <- err; return nil }, Budget: budget, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	msg := make([][]byte, most)
	for i := range msg {
		msg[i] = make([]byte, 100)
	}
	c := dial(t, r, "many")
	if err := c.WriteMsgs(msg); err != nil {
		t.Fatal(err)
	}
	<-in.got
	in.mu.Lock()
	got, held := len(in.msgs[0]), in.held[0]
	in.mu.Unlock()
	if want := int64(most-MaxFrames) * (100 + frameCost); got != most || held.total() != want || budget.Used() != want {
		t.Fatalf("%d frames holding %v (budget %d); want %d frames holding %d", got, held, budget.Used(), most, want)
	}
	budget.Release(held)
	_ = c.WriteMsgs(append(msg, []byte("one too many")))
	var tm *TooManyFramesError
	if err := <-refused; !errors.As(err, &tm) || !errors.Is(err, ErrTooManyFrames) || len(tm.Frames) != most {
		t.Fatalf("refused with %v, want a TooManyFramesError after %d frames", err, most)
	}
	if _, err := c.ReadMsg(); err == nil {
		t.Fatal("the connection stayed after a message of too many frames")
	}
	testutil.Eventually(t, "the refused message's room back", func() bool { return budget.Used() == 0 })
}
