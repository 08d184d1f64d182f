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
	f.String("broker", broker.DefaultOptions().Frontend, "the broker's frontend (or its publisher-incoming endpoint)")
	f.Duration("wait", defaultWait, "how long to wait for a connection")
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		payload, err := readPayload(cmd.InOrStdin(), args[1:])
		if err != nil {
			return err
		}
		wait, err := c.duration("wait")
		if err != nil {
			return err
		}
		sec, err := securityFrom(c)
		if err != nil {
			return err
		}
		cl, err := client.New(client.Options{Broker: c.str("broker"), Security: sec,
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
	f.String("publisher", broker.DefaultOptions().PublisherOutgoing, "the broker's publisher-outgoing endpoint")
	f.Bool("json", false, "print each message as a JSON object")
	f.Int("count", 0, "exit after this many messages (0 = run until interrupted)")
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		count, err := c.integer("count")
		if err != nil {
			return err
		}
		asJSON, err := c.boolean("json")
		if err != nil {
			return err
		}
		if len(args) == 0 {
			args = []string{""}
		}
		sec, err := securityFrom(c)
		if err != nil {
			return err
		}
		s, err := client.Subscribe(client.SubscriberOptions{Endpoint: c.str("publisher"), Security: sec,
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
