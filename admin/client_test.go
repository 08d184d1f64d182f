package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// A job's request without a msgid is refused by name before it is sent:
// the server would see "/api/v1/jobs//cancel" cleaned into another route.
func TestClientRefusesAnEmptyMsgID(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", nil, nil)
	c, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func() error{
		"Job":       func() error { _, err := c.Job(ctx, "", false); return err },
		"Payload":   func() error { _, err := c.Payload(ctx, ""); return err },
		"Result":    func() error { _, err := c.Result(ctx, ""); return err },
		"RemoveJob": func() error { return c.RemoveJob(ctx, "") },
		"RetryJob":  func() error { return c.RetryJob(ctx, "") },
		"CancelJob": func() error { _, err := c.CancelJob(ctx, ""); return err },
		"Why":       func() error { _, err := c.Why(ctx, ""); return err },
	}
	for name, call := range calls {
		if err := call(); err == nil || !strings.Contains(err.Error(), "a msgid is needed") {
			t.Errorf("%s with msgid \"\": %v, want it refused for its empty msgid", name, err)
		}
	}
}
