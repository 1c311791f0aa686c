package maintenance

import (
	"context"
	"time"

	"github.com/backstophq/backstop/internal/engine"
)

// RemoteSpans ends the spans of the remote attempts this process handed
// out whose lease ran out without a settlement here (Engine.SweepRemote).
// It is this process's memory: it runs in every process, without an
// election.
type RemoteSpans struct {
	base
	e *engine.Engine
}

// NewRemoteSpans makes the "remote_spans" service.
func NewRemoteSpans(e *engine.Engine, every time.Duration) *RemoteSpans {
	return &RemoteSpans{base: base{"remote_spans", every}, e: e}
}

// RunOnce sweeps once.
func (r *RemoteSpans) RunOnce(ctx context.Context) error {
	r.e.SweepRemote(ctx)
	return nil
}
