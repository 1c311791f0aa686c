package pgstore_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/store"
)

// A workflow plan's task insert counts its own rows: with the insert
// trigger off the counts still move exactly, whichever way the plan is
// sent (Store.WritePlan's pipeline, Txs.WritePlan in the caller's
// transaction, WritePlan held for the COMMIT in InTx); with it on nothing
// is counted twice. The mark is for the insert alone: none is left after
// the plan, and a plan whose ids are all taken inserts nothing, counts
// nothing and leaves no mark.
func TestPlanTaskInsertCountsItself(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	seedCounts(t, s, 60)
	checkCounts(t, s, "seeded")

	for _, trigger := range []string{"DISABLE", "ENABLE"} {
		exec(t, s, `ALTER TABLE backstop_tasks `+trigger+` TRIGGER backstop_task_counts_insert`)
		p := "plan-" + trigger
		if _, err := s.WritePlan(ctx, store.PlanWrite{Tasks: plainBatch(p+"-own", 7)}); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, p+": Store.WritePlan")

		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Txs().WritePlan(ctx, tx, store.PlanWrite{Tasks: plainBatch(p+"-tx", 5)}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		// The trigger on clears the mark (off, nothing does: a test's device).
		if m := countedMark(t, tx); trigger == "ENABLE" && m != "" {
			t.Fatalf("%s: mark left after the plan: %q", p, m)
		}
		// Every id taken: ON CONFLICT inserts nothing; the plan reports
		// the conflict.
		if _, err := s.Txs().WritePlan(ctx, tx, store.PlanWrite{Tasks: plainBatch(p+"-tx", 2)}); err == nil {
			t.Fatalf("%s: plan of taken ids: no error", p)
		}
		_ = tx.Rollback(context.WithoutCancel(ctx))
		tx2, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx2.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := s.Txs().WritePlan(ctx, tx2, store.PlanWrite{Tasks: plainBatch(p+"-tx", 5)}); err != nil {
			t.Fatal(err)
		}
		if err := tx2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, p+": Txs.WritePlan")

		err = s.InTx(ctx, func(tx store.Tx) error {
			_, err := tx.WritePlan(ctx, store.PlanWrite{Tasks: plainBatch(p+"-held", 6)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, p+": held for the COMMIT in InTx")
	}
}
