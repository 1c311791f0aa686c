package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testwait"
)

// TestWorkflowFanOutThroughExecWorker: a fan-out item's program reads the
// documented payload on stdin, the run's input included, though the item's
// stored payload only refers to it; a run whose fan-out passes
// limits.max_fanout_bytes (here from the environment) exits 2 naming it.
func TestWorkflowFanOutThroughExecWorker(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db, dir := st.url(t), t.TempDir()
			cliOK(t, "--db", db, "migrate")
			file := filepath.Join(dir, "fan.yaml")
			if err := os.WriteFile(file, []byte("name: fan\nqueue: wf\nsteps:\n  - {id: each, kind: each, for_each: input.items}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cliOK(t, "--db", db, "workflows", "apply", file)
			big := strings.Repeat("q", 20000)
			input := fmt.Sprintf(`{"big":%q,"items":[10,11,12,13,14]}`, big)

			_, errOut, code := wfCLI(t, []string{"BACKSTOP_LIMITS_MAX_FANOUT_BYTES=300"}, "--db", db, "workflows", "run", "fan", "--input", input)
			if code != 2 || !strings.Contains(errOut, "limits.max_fanout_bytes") {
				t.Fatalf("over the bound: exit %d: %s", code, errOut)
			}
			runID := strings.TrimSpace(cliOK(t, "--db", db, "workflows", "run", "fan", "--input", input))

			cmd := exec.Command(binary, "--db", db, "work", "--queue", "wf", "--concurrency", "2", "--",
				"sh", "-c", `cat > "$OUT/$BACKSTOP_TASK_ID.json"`)
			cmd.Env = append(os.Environ(), "OUT="+dir)
			startProc(t, cmd, filepath.Join(dir, "worker.stderr"), "worker", 0)

			ctx := context.Background()
			_, c := storeClient(t, db)
			testwait.For(t, "run "+runID+" to succeed", func() bool {
				r, err := c.WorkflowRun(ctx, runID)
				if err != nil {
					t.Fatal(err)
				}
				return r.State == "succeeded"
			})
			for i := range 5 {
				id := fmt.Sprintf("%s.each.%d", runID, i)
				stored, err := c.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(stored.Payload, []byte(big)) {
					t.Fatalf("%s stores the run's input", id)
				}
				got, err := os.ReadFile(filepath.Join(dir, id+".json"))
				if err != nil {
					t.Fatal(err)
				}
				want, _ := json.Marshal(map[string]any{"input": json.RawMessage(input), "results": map[string]any{},
					"item": 10 + i, "index": i})
				if string(got) != string(want) {
					t.Fatalf("%s's program read\n%.200s\nwant\n%.200s", id, got, want)
				}
			}
		})
	}
}
