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
)

// remoteLogFlushEvery is how often a remote attempt's output lines are
// sent (and once more before the attempt is reported).
const remoteLogFlushEvery = 500 * time.Millisecond

// remoteLog ships one remote attempt's log lines to POST
// /v1/tasks/{id}/logs, one request at a time, in batches.
type remoteLog struct {
	cl            *apiclient.Client
	taskID, token string
	log           *slog.Logger

	mu      sync.Mutex
	pending []backstop.RemoteLogLine
	full    bool // the execution's log reached its bound: stop sending
	stop    chan struct{}
	done    chan struct{}
}

func startRemoteLog(cl *apiclient.Client, taskID, token string, log *slog.Logger) *remoteLog {
	l := &remoteLog{cl: cl, taskID: taskID, token: token, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(remoteLogFlushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.flush()
			case <-l.stop:
				l.flush()
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
		l.pending = append(l.pending, backstop.RemoteLogLine{Stream: stream, Line: line})
	}
}

func (l *remoteLog) flush() {
	l.mu.Lock()
	batch := l.pending
	l.pending = nil
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := l.cl.AppendLogs(ctx, l.taskID, api.LogsRequest{LeaseToken: l.token, Lines: batch})
	var p *api.Problem
	switch {
	case errors.As(err, &p) && p.Status == 409:
		l.markFull() // the lease is gone: nothing more will be kept
	case err != nil:
		l.log.Warn("sending log lines failed; they are dropped", "error", err.Error(), "lines", len(batch))
	case res.Truncated:
		l.markFull()
	}
}

func (l *remoteLog) markFull() {
	l.mu.Lock()
	l.full, l.pending = true, nil
	l.mu.Unlock()
}

// close sends what is left; call it before the attempt is reported.
func (l *remoteLog) close() {
	close(l.stop)
	<-l.done
}
