package cli

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/remote"
)

// remoteLogFlushEvery is how often a remote attempt's output lines are
// sent (and once more before the attempt is reported).
const remoteLogFlushEvery = 500 * time.Millisecond

// remoteLog ships one remote attempt's log lines to POST
// /v1/tasks/{id}/logs, one request at a time, in batches. Lines a flush
// could not send for a retryable reason (the rate limit, a server restart)
// stay queued for the next one; the last flush, before the report, is
// retried like the report (apiclient.Retry).
type remoteLog struct {
	cl    *apiclient.Client
	lease apiclient.Lease
	log   *slog.Logger
	retry *apiclient.Retry // the last flush's; set before close

	mu      sync.Mutex
	pending []remote.LogLine
	full    bool // the execution's log reached its bound: stop sending
	warned  bool // a failed flush was logged (once per attempt)
	stop    chan struct{}
	done    chan struct{}
}

func startRemoteLog(cl *apiclient.Client, lease apiclient.Lease, log *slog.Logger) *remoteLog {
	l := &remoteLog{cl: cl, lease: lease, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(remoteLogFlushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.flush()
			case <-l.stop:
				return
			}
		}
	}()
	return l
}

// add is the attempt's log sink (backstop.ContextWithLogSink).
func (l *remoteLog) add(stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full && len(l.pending) < backstop.MaxLogLines {
		l.pending = append(l.pending, remote.LogLine{Stream: stream, Line: line})
	}
}

func (l *remoteLog) take() []remote.LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.pending
	l.pending = nil
	return batch
}

// flush sends the queued lines once; a retryable failure queues them again.
func (l *remoteLog) flush() {
	batch := l.take()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := l.cl.AppendLogs(ctx, l.lease.TaskID, api.LogsRequest{LeaseToken: l.lease.Token, Lines: batch})
	if retryable, _ := apiclient.Retryable(err); retryable {
		l.mu.Lock()
		if !l.full {
			l.pending = append(batch, l.pending...)
			l.pending = l.pending[:min(len(l.pending), backstop.MaxLogLines)]
		}
		warn := !l.warned
		l.warned = true
		l.mu.Unlock()
		if warn {
			l.log.Warn("sending log lines failed; they stay queued", "error", err.Error(), "lines", len(batch))
		}
		return
	}
	l.sent(res, err, len(batch))
}

func (l *remoteLog) sent(res *api.LogsResponse, err error, lines int) {
	switch s := apiclient.StatusOf(err); {
	case s == 409 || s == 404 || errors.Is(err, apiclient.ErrLeaseLost):
		l.markFull() // the lease is gone: nothing more will be kept
	case err != nil:
		l.log.Warn("sending log lines failed; they are dropped", "error", err.Error(), "lines", lines)
	case res.Truncated:
		l.markFull()
	}
}

func (l *remoteLog) markFull() {
	l.mu.Lock()
	l.full, l.pending = true, nil
	l.mu.Unlock()
}

// close stops the periodic flushes and sends what is left, retrying (with
// l.retry) until ctx ends; call it before the attempt is reported.
func (l *remoteLog) close(ctx context.Context) {
	close(l.stop)
	<-l.done
	batch := l.take()
	if len(batch) == 0 {
		return
	}
	res, err := l.cl.ReportLogs(ctx, l.lease, api.LogsRequest{Lines: batch}, l.retry)
	l.sent(res, err, len(batch))
}

// abandon stops the periodic flushes and drops what is left (the lease is
// lost: the server keeps no more lines of the attempt).
func (l *remoteLog) abandon() {
	close(l.stop)
	<-l.done
	l.markFull()
}
