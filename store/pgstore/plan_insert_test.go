package pgstore_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A workflow plan's task insert is one statement text for any number of
// tasks (of each form: held for the COMMIT, sent in a caller's
// transaction): a connection prepares and plans it once, not once per row
// count. The rows it writes read back as planned.
func TestPlanTaskInsertOneStatementForAnyRowCount(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := storeWithPool(t, b, 1)
	deadline := t0.Add(48 * time.Hour)
	var planned []*bt.Task
	for n := 1; n <= 6; n++ {
		tasks := make([]*bt.Task, n)
		for i := range tasks {
			tk := newTask("plan")
			tk.ID = fmt.Sprintf("run%d.s%d", n, i)
			tk.Priority, tk.Timeout, tk.Deadline = i, bt.Duration(time.Minute), &deadline
			tk.Attributes = map[string]string{"run_id": fmt.Sprintf("run%d", n), "step_id": fmt.Sprintf("s%d", i)}
			tk.Retry = &bt.RetryPolicy{Base: bt.Duration(time.Second), Factor: 3, Max: bt.Duration(time.Minute)}
			tk.Payload = json.RawMessage(fmt.Sprintf(`{"step": %d}`, i))
			tasks[i] = tk
		}
		planned = append(planned, tasks...)
		half := n / 2
		// Held for the COMMIT (InTx, strict), and sent in a pgx transaction.
		if err := s.InTx(ctx, func(tx store.Tx) error {
			_, err := tx.WritePlan(ctx, store.PlanWrite{Tasks: tasks[:half]})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Txs().WritePlan(ctx, tx, store.PlanWrite{Tasks: tasks[half:]}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var texts int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements
		WHERE statement LIKE 'WITH ev\_seq AS %ins AS (INSERT INTO backstop\_tasks %'`).Scan(&texts); err != nil {
		t.Fatal(err)
	}
	if texts > 2 {
		t.Errorf("the connection prepared %d task insert texts for plans of 1-6 tasks, want at most 2 (one per form)", texts)
	}
	for _, want := range planned {
		got, err := s.Get(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Queue != want.Queue || got.Kind != want.Kind || got.State != want.State || got.Priority != want.Priority ||
			got.MaxAttempts != want.MaxAttempts || got.Timeout != want.Timeout || !got.Deadline.Equal(*want.Deadline) ||
			!got.RunAt.Equal(want.RunAt) || !reflect.DeepEqual(got.Attributes, want.Attributes) ||
			!reflect.DeepEqual(got.Retry, want.Retry) || string(got.Payload) != `{"step": `+want.ID[len(want.ID)-1:]+`}` {
			t.Errorf("task %s read back as %+v, planned %+v", want.ID, got, want)
		}
	}
}
