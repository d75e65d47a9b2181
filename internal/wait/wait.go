// Package wait holds the pause between a client's retries.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, whose error it then returns.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
