package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/worker"
)

// A broker embedded in a program, with a worker and a client of its own:
// the job is journaled before the client's Request is ACKed, and the
// worker's REPLY comes back to it.
func Example() {
	dir, err := os.MkdirTemp("", "emq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	opts := broker.DefaultOptions()
	opts.Frontend, opts.Backend = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0" // free ports
	opts.PublisherIncoming, opts.PublisherOutgoing = "", ""                // no pub/sub
	opts.DataDir, opts.OpenJournal = dir, boltjournal.Open                 // the bbolt file in dir
	opts.Logger = quiet
	b, err := broker.New(opts)
	if err != nil {
		log.Fatal(err)
	}
	brokerDone := make(chan error, 1)
	go func() { brokerDone <- b.Run(context.Background()) }()
	<-b.Ready()

	w, err := worker.New(worker.Options{Broker: b.Backend(), Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	w.Handle("upper", func(_ context.Context, job *worker.Job) ([]byte, error) {
		return bytes.ToUpper(job.Payload), nil
	})
	workerCtx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	c, err := client.New(client.Options{Broker: b.Frontend(), Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	reqCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := c.Request(reqCtx, "upper", []byte("hello"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("REPLY %s\n", reply)

	// Stop: the client, then the worker (it says goodbye), then the broker
	// (nothing in flight: its drain ends at once).
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		log.Fatal(err)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	if err := <-brokerDone; err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped")
	// Output:
	// REPLY HELLO
	// stopped
}
