package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestFairnessAcrossProcesses: with `backstop queues fair crash --by
// tenant`, 10 tasks of tenant b enqueued after 1,000 of tenant a all
// finish within the first 110 of the 1,010 that two `backstop work`
// processes run on Postgres.
func TestFairnessAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Postgres(t), 0)
	ctx := context.Background()
	late := map[string]bool{}
	for _, tenant := range []struct {
		name string
		n    int
	}{{"a", 1000}, {"b", 10}} {
		params := make([]backstop.EnqueueParams, tenant.n)
		for i := range params {
			params[i] = backstop.EnqueueParams{Queue: queue, Kind: "job", Attributes: map[string]string{"tenant": tenant.name}}
		}
		res, err := b.client.EnqueueMany(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if tenant.name == "b" {
				late[r.Task.ID] = true
			}
		}
	}
	if out, err := exec.Command(binary, "--db", b.url, "queues", "fair", queue, "--by", "tenant").CombinedOutput(); err != nil {
		t.Fatalf("queues fair: %v\n%s", err, out)
	}
	var ws []*worker
	for _, name := range []string{"w1", "w2"} {
		ws = append(ws, b.startWorker(name, "0", "--exit-after-idle", "2s"))
	}
	for i, w := range ws {
		if code := w.wait(t, ws[i].stderr); code != 0 {
			t.Fatalf("worker %d exited with %d", i+1, code)
		}
	}
	log, err := os.ReadFile(b.runLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) != 1010 {
		t.Fatalf("%d runs, want 1010", len(lines))
	}
	last := 0
	for i, l := range lines {
		if late[strings.Fields(l)[0]] {
			last = i + 1
		}
	}
	t.Logf("the last of tenant b's tasks finished %d of 1010", last)
	if last == 0 || last > 110 {
		t.Fatalf("tenant b's last task finished %d of 1010, want within the first 110", last)
	}
}
