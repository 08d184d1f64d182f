package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
)

func newPubCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pub TOPIC [PAYLOAD | -]",
		Short: "Publish a message to the subscribers of TOPIC (not stored, not acknowledged)",
		Long: `Send a PUBLISH to the broker, which passes [TOPIC, PAYLOAD] to every
subscriber whose prefix matches TOPIC. The payload is the argument, or
standard input with "-". Pub/sub is fire-and-forget, as in EventMQ: the
broker does not store or acknowledge the message, and a subscriber that is
not connected does not get it. Exits once the message is written to the
connection.`,
		Args: cobra.RangeArgs(1, 2),
	}
	f := cmd.Flags()
	pubFlags(&binder{f: f}, new(broker.DefaultOptions().Frontend), new(defaultWait))
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var endpoint string
		var wait time.Duration
		b := reader()
		pubFlags(b, &endpoint, &wait)
		if err := b.apply(c); err != nil {
			return err
		}
		payload, err := readPayload(cmd.InOrStdin(), args[1:])
		if err != nil {
			return err
		}
		sec, err := securityFrom(c)
		if err != nil {
			return err
		}
		cl, err := client.New(client.Options{Broker: endpoint, Security: sec,
			Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		if err := cl.Publish(ctx, args[0], payload); err != nil {
			cl.Close()
			return err
		}
		return cl.Close() // writes the message
	}
	return cmd
}

// pubFlags declares emq pub's flags, but the security ones.
func pubFlags(b *binder, endpoint *string, wait *time.Duration) {
	b.str(endpoint, "broker", "the broker's frontend (or its publisher-incoming endpoint)")
	b.duration(wait, "wait", "how long to wait for a connection")
}

func newSubCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sub [PREFIX...]",
		Short: "Print the messages published to topics starting with PREFIX (none: every topic)",
		Long: `Subscribe to the broker's publisher-outgoing endpoint, as a ZeroMQ SUB
socket, and print each message as TOPIC, a tab and PAYLOAD on one line, or
with --json as {"topic": ..., "payload": ...} (payload_base64 when the
payload is not UTF-8). Runs until interrupted, or --count messages.
Reconnects when the broker restarts; what is published meanwhile is not
received.`,
	}
	f := cmd.Flags()
	subFlags(&binder{f: f}, &subOptions{endpoint: broker.DefaultOptions().PublisherOutgoing})
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var o subOptions
		b := reader()
		subFlags(b, &o)
		if err := b.apply(c); err != nil {
			return err
		}
		count, asJSON := o.count, o.asJSON
		if len(args) == 0 {
			args = []string{""}
		}
		sec, err := securityFrom(c)
		if err != nil {
			return err
		}
		s, err := client.Subscribe(client.SubscriberOptions{Endpoint: o.endpoint, Security: sec,
			Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))}, args...)
		if err != nil {
			return err
		}
		defer s.Close()
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		out := cmd.OutOrStdout()
		enc := json.NewEncoder(out)
		for n := 0; count == 0 || n < count; n++ {
			m, err := s.Recv(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted
				}
				return err
			}
			if !asJSON {
				if _, err := fmt.Fprintf(out, "%s\t%s\n", m.Topic, m.Payload); err != nil {
					return err
				}
				continue
			}
			line := map[string]string{"topic": m.Topic}
			if utf8.Valid(m.Payload) {
				line["payload"] = string(m.Payload)
			} else {
				line["payload_base64"] = base64.StdEncoding.EncodeToString(m.Payload)
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
		}
		return nil
	}
	return cmd
}

// subOptions are emq sub's flags, but the security ones.
type subOptions struct {
	endpoint string
	asJSON   bool
	count    int
}

// subFlags declares emq sub's flags, but the security ones.
func subFlags(b *binder, o *subOptions) {
	b.str(&o.endpoint, "publisher", "the broker's publisher-outgoing endpoint")
	jsonFlag(b, &o.asJSON, "print each message as a JSON object")
	b.integer(&o.count, "count", "exit after this many messages (0 = run until interrupted)")
}
