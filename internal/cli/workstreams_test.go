package cli_test

import (
	"context"
	"slices"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// `backstop work` keeps its program's stdout and stderr apart in the
// attempt's log (streams stdout and stderr), and registers its worker with
// the binary's version and the label runner=exec (the console's Workers
// page tells it from a library or in-process worker by it).
func TestWorkStreamsAndRegistry(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := workClient(t, db)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "ws", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execMain(t, "--db", db, "work", "--queue", "ws", "--id", "exec-1", "--exit-after-idle", "300ms", "--",
		"sh", "-c", `echo to-stdout; echo to-stderr >&2`)
	if code != 0 {
		t.Fatalf("work exited %d: %s", code, stderr)
	}
	task, err := c.Get(ctx, res.Task.ID)
	if err != nil || len(task.Executions) != 1 {
		t.Fatalf("task: %+v %v", task, err)
	}
	lines, err := c.ReadLogs(ctx, task.ID, task.Executions[0].ExecutionID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines {
		got = append(got, l.Stream+" "+l.Line)
	}
	slices.Sort(got) // the two pipes are read side by side
	if want := []string{"stderr to-stderr", "stdout to-stdout"}; !slices.Equal(got, want) {
		t.Fatalf("log lines: %q, want %q", got, want)
	}
	ws, err := c.Workers(ctx, backstop.WorkerListParams{})
	if err != nil || len(ws) != 1 {
		t.Fatalf("workers: %+v %v", ws, err)
	}
	if w := ws[0]; w.ID != "exec-1" || w.Labels["runner"] != "exec" || w.Version == "" || w.Remote {
		t.Fatalf("the exec worker's registration: %+v", w)
	}
}
