package backstop

import (
	"context"
	"encoding/json"

	"github.com/backstophq/backstop/internal/remote"
)

// The server side of the remote worker protocol is not part of the
// library's surface: the HTTP API (and the tests) reach it through
// internal/remote, whose accessor this installs. remote.Of(c) is c's
// protocol; the calls are the Client's unexported methods (remote.go,
// remote_batch.go, release.go, logs.go, workers.go, remote_attempts.go).
func init() {
	remote.Install(func(c any) remote.Protocol { return remoteProtocol{c.(*Client)} })
}

// remoteProtocol is a Client as remote.Protocol.
type remoteProtocol struct{ c *Client }

func (p remoteProtocol) Claim(ctx context.Context, q remote.Claim) ([]remote.Lease, error) {
	return p.c.claimRemote(ctx, q)
}

func (p remoteProtocol) Heartbeat(ctx context.Context, b remote.Beat) (*remote.BeatResult, error) {
	return p.c.heartbeatRemote(ctx, b)
}

func (p remoteProtocol) Complete(ctx context.Context, taskID, leaseToken string, pr *Progress, result json.RawMessage) (*remote.Result, error) {
	return p.c.completeRemote(ctx, taskID, leaseToken, pr, result)
}

func (p remoteProtocol) CompleteMany(ctx context.Context, cs []remote.Completion) ([]remote.Outcome, error) {
	return p.c.completeManyRemote(ctx, cs)
}

func (p remoteProtocol) Fail(ctx context.Context, f remote.Failure) (*remote.Result, error) {
	return p.c.failRemote(ctx, f)
}

func (p remoteProtocol) Release(ctx context.Context, taskID, leaseToken string, pr *Progress) (*remote.Result, error) {
	return p.c.releaseRemote(ctx, taskID, leaseToken, pr)
}

func (p remoteProtocol) AppendLogs(ctx context.Context, taskID, leaseToken string, lines []remote.LogLine) (remote.LogResult, error) {
	return p.c.appendRemoteLogs(ctx, taskID, leaseToken, lines)
}

func (p remoteProtocol) TraceParent(executionID string) string {
	return p.c.remoteTraceParent(executionID)
}

func (p remoteProtocol) RegisterWorker(ctx context.Context, w WorkerInfo) (*WorkerInfo, error) {
	return p.c.registerRemoteWorker(ctx, w)
}

func (p remoteProtocol) WorkerHeartbeat(ctx context.Context, id string, draining bool) (*WorkerInfo, error) {
	return p.c.remoteWorkerHeartbeat(ctx, id, draining)
}

func (p remoteProtocol) StopWorker(ctx context.Context, id string) (*WorkerInfo, error) {
	return p.c.stopRemoteWorker(ctx, id)
}

func (p remoteProtocol) SeeWorker(ctx context.Context, id, host string, queues []string) error {
	return p.c.seeRemoteWorker(ctx, id, host, queues)
}
