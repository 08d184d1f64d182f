package zmtp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// BenchmarkEcho: 16 DEALERs (this package's Dial), each with 32 messages of
// 7 frames in flight, against a ROUTER that sends every message back: zmq4's
// own ROUTER as it comes, and this package's Router.
//
//	go test -run '^$' -bench Echo ./internal/zmtp/
func BenchmarkEcho(b *testing.B) {
	b.Run("router=zmq4", func(b *testing.B) {
		r := zmq4.NewRouter(context.Background())
		defer r.Close()
		if err := r.Listen("tcp://127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				m, err := r.Recv()
				if err != nil {
					return
				}
				if err := r.Send(m); err != nil {
					return
				}
			}
		}()
		echo(b, "tcp://"+r.Addr().String())
	})
	b.Run("router=zmtp", func(b *testing.B) {
		var r *Router
		r, err := Listen("tcp://127.0.0.1:0", Options{
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Receive: func(id string, frames [][]byte, _ Held) { r.Send(id, frames) },
		})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		echo(b, r.Endpoint())
	})
}

func echo(b *testing.B, endpoint string) {
	const peers, window = 16, 32
	msg := [][]byte{{}, []byte("eMQP/1.0"), []byte("REQUEST"), []byte("01a229c4-6eca-7102-a10c-54fe39b9f48e"),
		[]byte("default"), []byte("reply-requested"), make([]byte, 100)}
	per := b.N/peers + 1
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for p := range peers {
		c, err := Dial(context.Background(), endpoint, DialOptions{Identity: []byte(fmt.Sprint("peer-", p))})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		credit := make(chan struct{}, window)
		for range window {
			credit <- struct{}{}
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range per {
				if _, err := c.ReadMsg(); err != nil {
					b.Error(err)
					return
				}
				credit <- struct{}{}
			}
		}()
		go func() {
			defer wg.Done()
			for range per {
				<-credit
				if err := c.WriteMsgs(msg); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*peers)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkHandshake is new connections a second, each dialled,
// admitted and closed, by mechanism.
func BenchmarkHandshake(b *testing.B) {
	cpub, csec, _ := NewKeyPair()
	spub, ssec, _ := NewKeyPair()
	for _, tc := range []struct {
		name string
		ss   *ServerSecurity
		cs   *ClientSecurity
	}{
		{"NULL", nil, nil},
		{"CURVE", &ServerSecurity{Curve: &ssec, Admit: func(*Auth, string) error { return nil }},
			&ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: cpub, Secret: csec}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r, err := Listen("tcp://127.0.0.1:0", Options{Security: tc.ss, Receive: func(string, [][]byte, Held) {},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			for b.Loop() {
				c, err := Dial(context.Background(), r.Endpoint(), DialOptions{Security: tc.cs})
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
		})
	}
}
