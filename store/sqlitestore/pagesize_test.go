package sqlitestore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// filePragmas reads the writer's page size and autocheckpoint (in pages).
func filePragmas(t *testing.T, s *Store) (pageSize, checkpoint int) {
	t.Helper()
	if err := s.w.QueryRowContext(t.Context(), `PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	if err := s.w.QueryRowContext(t.Context(), `PRAGMA wal_autocheckpoint`).Scan(&checkpoint); err != nil {
		t.Fatal(err)
	}
	return pageSize, checkpoint
}

// A new file gets 16 KiB pages and checkpoints every 16 MiB of WAL. A file
// created with 4 KiB pages and holding tasks keeps its pages, checkpoints
// every 16 MiB of WAL too (4,096 of its pages), and its tasks are claimed
// and settled as before.
func TestPageSizeNewFilesOnly(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, cp := filePragmas(t, s); ps != 16384 || cp != 1024 {
		t.Fatalf("new file: page_size %d, wal_autocheckpoint %d; want 16384, 1024", ps, cp)
	}

	// A file of the previous page size holding waiting tasks: rebuilt with
	// 4 KiB pages (what every file created before had).
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []*bt.Task
	for i := range 50 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("ps-%02d", i), Queue: "ps", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{"n":1}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`PRAGMA journal_mode = DELETE`, `PRAGMA page_size = 4096`, `VACUUM`, `PRAGMA journal_mode = WAL`} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	old, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, cp := filePragmas(t, old); ps != 4096 || cp != 4096 {
		t.Fatalf("4 KiB file: page_size %d, wal_autocheckpoint %d; want 4096, 4096", ps, cp)
	}
	got, err := old.Claim(ctx, store.ClaimParams{Queue: "ps", WorkerID: "w", Max: 100, Now: t0, Lease: time.Minute})
	if err != nil || len(got) != len(tasks) {
		t.Fatalf("claim: %d of %d, %v", len(got), len(tasks), err)
	}
	var ss []store.Settlement
	for _, c := range got {
		ss = append(ss, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
	}
	applied, err := old.Settle(ctx, ss)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("settlement %d (%s) not applied", i, ss[i].TaskID)
		}
	}
	var n int
	if err := old.w.QueryRowContext(ctx, `SELECT count(*) FROM backstop_tasks WHERE queue = 'ps' AND state = 'succeeded'`).Scan(&n); err != nil || n != len(tasks) {
		t.Fatalf("succeeded: %d, %v", n, err)
	}
}
