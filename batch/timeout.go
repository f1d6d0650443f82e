package batch

import (
	"context"
	"errors"
	"time"

	"github.com/jonboulle/clockwork"
)

// withTimeout is context.WithTimeout on clk, so handler timeouts follow a fake clock in tests.
// clockwork.WithTimeout cannot serve: the Err of its fake-clock context blocks until the
// context is done, and the MySQL driver calls Err before every query.
func withTimeout(parent context.Context, clk clockwork.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancelCause(parent)
	t := clk.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return timeoutCtx{inner}, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// timeoutCtx reports its own timeout as context.DeadlineExceeded, as a deadline context does.
type timeoutCtx struct{ context.Context }

func (c timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
