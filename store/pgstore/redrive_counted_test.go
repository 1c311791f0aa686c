package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A redrive batch's one statement counts its own batch, as the claim does:
// with both update triggers off (the task counts' and the dead letters'
// groups') a redrive of dead letters of two queues and three groups, in
// batches of 7, still moves the kept counts and groups exactly; with the
// triggers on again the next redrive is not counted twice.
func TestRedriveBatchCountsItself(t *testing.T) {
	b := setup(t)
	s := b.store
	var tasks []*bt.Task
	for i := range 40 {
		tk := newTask([]string{"ra", "rb"}[i%2])
		tk.ID = fmt.Sprintf("rc-%03d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	at := t0.Add(time.Minute)
	for _, q := range []string{"ra", "rb"} {
		got := claim(t, s, q, 20, at)
		settle(t, s, killed("timeout", at, got[:8]...)...)
		settle(t, s, killed("refused", at, got[8:15]...)...)
		settle(t, s, killed("", at, got[15:]...)...)
	}
	checkKept(t, s, "dead")

	exec(t, s, `ALTER TABLE backstop_tasks DISABLE TRIGGER backstop_task_counts_update, DISABLE TRIGGER backstop_dlq_group_counts_update`)
	if n := redriveQueue(t, s, "rd-ra", "ra", at.Add(time.Minute)); n != 20 {
		t.Fatalf("redrove %d of ra, want 20", n)
	}
	checkKept(t, s, "redriven, triggers off")

	exec(t, s, `ALTER TABLE backstop_tasks ENABLE TRIGGER backstop_task_counts_update, ENABLE TRIGGER backstop_dlq_group_counts_update`)
	if n := redriveQueue(t, s, "rd-rb", "rb", at.Add(time.Minute)); n != 20 {
		t.Fatalf("redrove %d of rb, want 20", n)
	}
	checkKept(t, s, "redriven, triggers on")
	if _, err := s.FoldCounts(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkKept(t, s, "folded")
}
