package cli

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// remoteCompleter sends the successes of a remote worker's slots in
// batches (POST /v1/tasks/complete, which the server settles as one
// SettleMany): one request in flight at a time, carrying every success
// that finished while the one before was in flight, up to
// api.MaxCompleteBatch. No timer: a lone success goes at once, so a quiet
// worker reports as fast as with one request per task, and a busy one
// sends a request per batch instead of per task. Each slot waits for its
// own answer (its heartbeats go on meanwhile), which is per task: a lost
// lease is that task's, as with a single report.
type remoteCompleter struct {
	cl *apiclient.Client

	mu      sync.Mutex
	pending []*remoteCompletion
	sending bool
	// single: the server has no batch endpoint (an older server answered
	// 404 or 405); every success is then reported on its own.
	single atomic.Bool
}

type remoteCompletion struct {
	c     apiclient.Completion
	ctx   context.Context // the slot's report context: bounds the retrying
	retry *apiclient.Retry
	done  chan struct{}
	rep   *apiclient.Report
	err   error
}

// complete reports one success, with whatever else is pending, and waits
// for its answer; ctx bounds the retrying as it bounds ReportComplete's.
func (rc *remoteCompleter) complete(ctx context.Context, c apiclient.Completion, retry *apiclient.Retry) (*apiclient.Report, error) {
	if rc.single.Load() {
		return rc.cl.ReportComplete(ctx, c.Lease, api.CompleteRequest{Result: c.Result, Progress: c.Progress}, retry)
	}
	req := &remoteCompletion{c: c, ctx: ctx, retry: retry, done: make(chan struct{})}
	rc.mu.Lock()
	rc.pending = append(rc.pending, req)
	if !rc.sending {
		rc.sending = true
		go rc.send()
	}
	rc.mu.Unlock()
	<-req.done
	return req.rep, req.err
}

// remoteBatchResultBytes bounds the results one batch carries, well under
// the server's default body bound (10 MiB), so that results of up to
// 1 MiB each never make a batch too large; a batch holds at least one.
const remoteBatchResultBytes = 1 << 20

// send sends batches until nothing is pending.
func (rc *remoteCompleter) send() {
	for {
		rc.mu.Lock()
		n, size := 0, 0
		for n < len(rc.pending) && n < api.MaxCompleteBatch {
			size += len(rc.pending[n].c.Result)
			if n > 0 && size > remoteBatchResultBytes {
				break
			}
			n++
		}
		if n == 0 {
			rc.sending = false
			rc.mu.Unlock()
			return
		}
		batch := rc.pending[:n:n]
		rc.pending = append([]*remoteCompletion(nil), rc.pending[n:]...)
		rc.mu.Unlock()
		rc.sendBatch(batch)
	}
}

// sendBatch sends one batch, retrying (with its first item's Retry) until
// it lands, is refused, or every item's report context has ended.
func (rc *remoteCompleter) sendBatch(batch []*remoteCompletion) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var left atomic.Int32
	left.Store(int32(len(batch)))
	for _, r := range batch {
		stop := context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(r.ctx))
			}
		})
		defer stop()
	}
	cs := make([]apiclient.Completion, len(batch))
	for i, r := range batch {
		cs[i] = r.c
	}
	res, err := rc.cl.ReportCompleteMany(ctx, cs, batch[0].retry)
	s := apiclient.StatusOf(err)
	if s == http.StatusNotFound || s == http.StatusMethodNotAllowed || (s == http.StatusRequestEntityTooLarge && len(batch) > 1) {
		// No batch endpoint on this server (one by one from now on), or
		// a batch over the server's body bound (this batch one by one:
		// each item then gets its own answer).
		if s != http.StatusRequestEntityTooLarge {
			rc.single.Store(true)
		}
		var wg sync.WaitGroup
		for _, r := range batch {
			wg.Go(func() {
				r.rep, r.err = rc.cl.ReportComplete(r.ctx, r.c.Lease,
					api.CompleteRequest{Result: r.c.Result, Progress: r.c.Progress}, r.retry)
				close(r.done)
			})
		}
		wg.Wait()
		return
	}
	for i, r := range batch {
		if err != nil {
			r.err = err
		} else {
			r.rep, r.err = res[i].Report, res[i].Err
		}
		close(r.done)
	}
}
