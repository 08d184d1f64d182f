package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/eventmq/emq/client"
)

// Send a job and wait until the broker has stored it; then send one and
// wait for the worker's REPLY.
func Example() {
	c, err := client.New(client.Options{Broker: "tcp://127.0.0.1:47290"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	msgid, err := c.Send(ctx, "email", []byte(`{"to": "ada@example.com"}`),
		client.Timeout(time.Minute), client.RetryCount(5))
	if err != nil {
		panic(err) // a *client.BrokerError names the broker's code and text
	}
	fmt.Println("stored as", msgid)

	reply, err := c.Request(ctx, "resize", []byte("image-42.png"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("worker replied %q\n", reply)
}
