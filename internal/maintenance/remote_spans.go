package maintenance

import (
	"context"
	"time"
)

// RemoteSpans ends the trace spans of remote attempts this process handed
// out and another process settled (remote_attempts.go in the root
// package). The spans live in this process's memory, so the service runs
// in every process, under no leadership.
type RemoteSpans struct {
	base
	sweep func(ctx context.Context)
}

// NewRemoteSpans makes the "remote_spans" service.
func NewRemoteSpans(sweep func(ctx context.Context), every time.Duration) *RemoteSpans {
	return &RemoteSpans{base: base{"remote_spans", every}, sweep: sweep}
}

// RunOnce sweeps once.
func (r *RemoteSpans) RunOnce(ctx context.Context) error {
	r.sweep(ctx)
	return nil
}
