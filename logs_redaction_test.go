package backstop

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestExecutionLogsMasked: what a handler writes into its execution log
// (its Logger's records, WriteLog lines as key=value text or JSON) and the
// output it records as the failure's detail are masked by the configured
// key list before they are stored; so is what a remote worker sends.
func TestExecutionLogsMasked(t *testing.T) {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(s, &Config{RedactKeys: []string{"ssn"}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"q": 1}, PollInterval: 20 * time.Millisecond, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", HandlerFunc(func(ctx context.Context, tk *Task) error {
		Logger(ctx).Info("connecting", "user", "bob", "password", "hunter2-A")
		WriteLog(ctx, LogStreamOutput, `{"level":"info","msg":"call","api_key":"hunter2-B","n":1}`)
		WriteLog(ctx, LogStreamOutput, "GET /v1?token=hunter2-C&page=2 ssn=hunter2-D")
		RecordDetail(ctx, "stderr tail\nAuthorization: Bearer hunter2-E\nexit 1")
		return Permanent(errors.New("failed"))
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the task to be dead", func() bool {
		tk, err := c.Get(ctx, r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		return tk.State == bt.StateDead
	})
	if err := w.Stop(ctx); err != nil { // flushes the execution log
		t.Fatal(err)
	}
	exs, err := s.Executions(ctx, r.Task.ID)
	if err != nil || len(exs) != 1 {
		t.Fatalf("executions %v %v", exs, err)
	}
	lines, err := c.ReadLogs(ctx, r.Task.ID, exs[0].ExecutionID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, l := range lines {
		all = append(all, l.Line)
	}
	got := strings.Join(all, "\n")
	want := "INFO connecting user=bob password=[REDACTED]\n" +
		`{"level":"info","msg":"call","api_key":"[REDACTED]","n":1}` + "\n" +
		"GET /v1?token=[REDACTED]&page=2 ssn=[REDACTED]\n" +
		"WARN task dead-lettered reason=permanent_error outcome=permanent_error error=failed"
	if got != want {
		t.Errorf("stored log:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(exs[0].ErrorDetail, "hunter2") || !strings.Contains(exs[0].ErrorDetail, "Authorization: [REDACTED]") {
		t.Errorf("error detail %q: want the secret masked", exs[0].ErrorDetail)
	}

	// A remote worker's lines and failure detail, through the library.
	r2, err := c.Enqueue(ctx, EnqueueParams{Queue: "rq", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := remote.New(c.e).Claim(ctx, remote.Claim{Queues: []string{"rq"}, WorkerID: "w"})
	if err != nil || len(ts) != 1 {
		t.Fatalf("claim %v %v", ts, err)
	}
	if _, err := remote.New(c.e).AppendLogs(ctx, r2.Task.ID, ts[0].LeaseToken, []remote.LogLine{{Line: "db secret=hunter2-F ok"},
		{Stream: LogStreamLog, Line: `ts=1 msg="x" {"credential":"hunter2-G"}`}}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(c.e).Fail(ctx, remote.Failure{TaskID: r2.Task.ID, LeaseToken: ts[0].LeaseToken, Outcome: bt.OutcomePermanentError,
		ErrorDetail: "password: hunter2-H"}); err != nil {
		t.Fatal(err)
	}
	lines, err = c.ReadLogs(ctx, r2.Task.ID, ts[0].ExecutionID, 0, 100)
	if err != nil || len(lines) != 2 {
		t.Fatalf("remote lines %v %v", lines, err)
	}
	if lines[0].Line != "db secret=[REDACTED] ok" || lines[1].Line != `ts=1 msg="x" {"credential":"[REDACTED]"}` {
		t.Errorf("remote lines %q / %q", lines[0].Line, lines[1].Line)
	}
	exs, _ = s.Executions(ctx, r2.Task.ID)
	if len(exs) != 1 || exs[0].ErrorDetail != "password: [REDACTED]" {
		t.Errorf("remote error detail %+v", exs)
	}
}
