package cli

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

func TestQueuesPauseResumeCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "mail", "--kind", "send")
		var p queuePauseJSON
		e.json(&p, "queues", "pause", "mail", "--actor", "alice")
		if !p.Paused || !p.Changed || p.Pause == nil || p.Pause.PausedBy != "alice" {
			t.Fatalf("pause: %+v", p)
		}
		if out := e.ok("queues", "pause", "mail"); !strings.Contains(out, "already paused") || !strings.Contains(out, "alice") {
			t.Fatalf("pause again: %q", out)
		}
		e.ok("queues", "pause", "idle")
		var qs []backstop.QueueSummary
		e.json(&qs, "queues", "list")
		if len(qs) != 2 || qs[0].Name != "idle" || !qs[0].Paused || qs[1].Name != "mail" || !qs[1].Paused ||
			qs[1].Counts[backstop.StatePending] != 1 || qs[1].Total != 1 {
			t.Fatalf("list: %+v", qs)
		}
		if out := e.ok("queues", "list"); !strings.Contains(out, "QUEUE") || !strings.Contains(out, "by alice") {
			t.Fatalf("list table: %q", out)
		}
		e.fails(ExitUsage, "queue", "queues", "pause", "bad queue!")
		if out := e.ok("queues", "resume", "mail"); !strings.Contains(out, "resumed queue mail") {
			t.Fatalf("resume: %q", out)
		}
		if out := e.ok("queues", "resume", "mail"); !strings.Contains(out, "was not paused") {
			t.Fatalf("resume again: %q", out)
		}
		e.json(&qs, "queues", "list")
		if qs[1].Paused {
			t.Fatalf("mail still paused: %+v", qs[1])
		}
	})
}

func TestRunsShowCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "imp", "--kind", "row", "--attr", "run_id=r1")
		e.ok("enqueue", "--queue", "imp", "--kind", "row", "--attr", "run_id=r1", "--delay", "1h")
		e.ok("enqueue", "--queue", "imp", "--kind", "row", "--attr", "run_id=r2")
		var r backstop.Run
		e.json(&r, "runs", "show", "r1")
		if r.RunID != "r1" || r.Total != 2 || r.Counts[backstop.StatePending] != 1 || r.Counts[backstop.StateScheduled] != 1 || r.Finished {
			t.Fatalf("run: %+v", r)
		}
		if out := e.ok("runs", "show", "r1"); !strings.Contains(out, "pending") || !strings.Contains(out, "progress") {
			t.Fatalf("run table: %q", out)
		}
		e.fails(ExitNotFound, "no tasks", "runs", "show", "nope")
	})
}
