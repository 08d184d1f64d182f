package reach

import (
	"context"
	"fmt"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
)

// Routes asks the broker at endpoints (comma-separated: the first that
// greets) for its placement (ROUTES), with identity as its routing id.
// It waits until ctx ends: a broker that does not answer ROUTES (not
// EMQ's) gives an error then.
func Routes(ctx context.Context, endpoints, identity string, sec Security) (*emqp.RouteTable, error) {
	cs, err := sec.Dial()
	if err != nil {
		return nil, err
	}
	conn, err := zmtp.DialAny(ctx, endpoints, zmtp.DialOptions{Identity: []byte(identity), Security: cs})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	ask := &emqp.Routes{MsgID: emqp.NewID()}
	if err := conn.WriteMsgs(emqp.Encode(ask)); err != nil {
		return nil, err
	}
	for {
		m, err := emqp.ReadMessage(conn.ReadMsg, func(error) {})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("no answer to ROUTES: %w", ctx.Err())
			}
			return nil, err
		}
		switch m := m.(type) {
		case *emqp.Routes:
			if m.MsgID == ask.MsgID {
				return emqp.ParseRouteTable(m.Table)
			}
		case *emqp.Error:
			if m.RefMsgID == ask.MsgID {
				return nil, fmt.Errorf("ROUTES refused: %s: %s", m.Code, m.Text)
			}
		}
	}
}
