package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/remote"
)

// testLogs: execution logs written by in-process handlers (Logger and
// WriteLog) and by remote workers (lease-checked), bounded, paged.
func (s *suite) testLogs(t *testing.T) {
	t.Run("InProcess", s.testLogsInProcess)
	t.Run("Remote", s.testLogsRemote)
}

func logText(ls []backstop.LogLine) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "%d %s %s\n", l.Seq, l.Stream, l.Line)
	}
	return b.String()
}

func (s *suite) testLogsInProcess(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.enqueue(backstop.EnqueueParams{ID: "talks", Queue: "default", Kind: "talk"})
	b.enqueue(backstop.EnqueueParams{ID: "floods", Queue: "default", Kind: "flood"})
	w := b.worker(nil, map[string]backstop.Handler{
		"talk": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			backstop.Logger(ctx).Info("starting", "n", 3)
			backstop.Logger(ctx).Debug("not kept: below info")
			backstop.WriteLog(ctx, backstop.LogStreamOutput, "raw line\n")
			backstop.Logger(ctx).With("step", 2).Warn("almost")
			return nil
		}),
		"flood": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			for i := range backstop.MaxLogLines + 50 {
				backstop.WriteLog(ctx, backstop.LogStreamOutput, fmt.Sprintf("line %d", i+1))
			}
			return nil
		}),
	})
	b.waitState("talks", backstop.StateSucceeded)
	b.waitState("floods", backstop.StateSucceeded)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil { // flushes what is pending
		t.Fatal(err)
	}
	talks := b.get("talks")
	ls, err := b.c.ReadLogs(b.ctx, "talks", talks.Executions[0].ExecutionID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "talk log", logText(ls), "1 log INFO starting n=3\n2 output raw line\n3 log WARN almost step=2\n")

	floods := b.get("floods")
	ex := floods.Executions[0].ExecutionID
	ls, err = b.c.ReadLogs(b.ctx, "floods", ex, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != backstop.MaxLogLines+1 || ls[backstop.MaxLogLines-1].Line != fmt.Sprintf("line %d", backstop.MaxLogLines) ||
		ls[backstop.MaxLogLines].Stream != backstop.LogStreamTruncated {
		t.Fatalf("flood: %d lines, last %+v", len(ls), ls[len(ls)-1])
	}
	page, err := b.c.ReadLogs(b.ctx, "floods", ex, 10, 2)
	if err != nil || logText(page) != "11 output line 11\n12 output line 12\n" {
		t.Fatalf("page: %q %v", logText(page), err)
	}
	if ls, err := b.c.ReadLogs(b.ctx, "talks", ex, 0, 10); err != nil || len(ls) != 0 {
		t.Fatalf("another task's execution: %v %v", ls, err)
	}
	if _, err := b.c.ReadLogs(b.ctx, "nope", ex, 0, 10); !errors.Is(err, backstop.ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	if _, err := b.c.ReadLogs(b.ctx, "floods", ex, 0, 0); !errors.Is(err, backstop.ErrInvalid) {
		t.Fatalf("limit 0: %v", err)
	}
}

func (s *suite) testLogsRemote(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.enqueue(backstop.EnqueueParams{ID: "r", Queue: "q", Kind: "k"})
	ts, err := remote.New(b.c.Engine()).Claim(b.ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "rw"})
	if err != nil || len(ts) != 1 {
		t.Fatalf("claim: %v %v", ts, err)
	}
	tok, ex := ts[0].LeaseToken, ts[0].ExecutionID
	res, err := remote.New(b.c.Engine()).AppendLogs(b.ctx, "r", tok, []remote.LogLine{{Line: "one"}, {Stream: "log", Line: "two"}})
	if err != nil || res.Accepted != 2 || res.Truncated {
		t.Fatalf("append: %+v %v", res, err)
	}
	if _, err := remote.New(b.c.Engine()).AppendLogs(b.ctx, "r", "not-the-lease", []remote.LogLine{{Line: "x"}}); !errors.Is(err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("stale token: %v", err)
	}
	if _, err := remote.New(b.c.Engine()).AppendLogs(b.ctx, "r", tok, []remote.LogLine{{Stream: "bogus", Line: "x"}}); !errors.Is(err, backstop.ErrInvalid) {
		t.Fatalf("bad stream: %v", err)
	}
	// Fill up to the bound across requests: the rest is cut, one marker.
	many := make([]remote.LogLine, backstop.MaxLogLines)
	for i := range many {
		many[i] = remote.LogLine{Line: fmt.Sprint(i)}
	}
	res, err = remote.New(b.c.Engine()).AppendLogs(b.ctx, "r", tok, many)
	if err != nil || res.Accepted != backstop.MaxLogLines-2 || !res.Truncated {
		t.Fatalf("fill: %+v %v", res, err)
	}
	res, err = remote.New(b.c.Engine()).AppendLogs(b.ctx, "r", tok, []remote.LogLine{{Line: "late"}})
	if err != nil || res.Accepted != 0 || !res.Truncated {
		t.Fatalf("after the bound: %+v %v", res, err)
	}
	ls, err := b.c.ReadLogs(b.ctx, "r", ex, 0, 10000)
	if err != nil || len(ls) != backstop.MaxLogLines+1 || ls[0].Line != "one" || ls[1].Stream != "log" ||
		ls[len(ls)-1].Stream != backstop.LogStreamTruncated {
		t.Fatalf("read: %d lines %v", len(ls), err)
	}
	// Once the attempt is settled its token is stale: 409, nothing written.
	if _, err := remote.New(b.c.Engine()).Complete(b.ctx, "r", tok, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(b.c.Engine()).AppendLogs(b.ctx, "r", tok, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("after complete: %v", err)
	}
}
