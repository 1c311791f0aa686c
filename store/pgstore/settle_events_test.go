package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// cteScans counts the plan nodes under p that scan the CTE name.
func cteScans(p map[string]any, name string) int {
	n := 0
	if p["Node Type"] == "CTE Scan" && p["CTE Name"] == name {
		n++
	}
	kids, _ := p["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			n += cteScans(m, name)
		}
	}
	return n
}

// The success settle reads its updated rows once for both of its event
// rows (task.started and task.succeeded share their subjects, queues,
// kinds and attributes), once for its count and once for its answer: three
// scans of settled, not four. Its two rows are as before: started then
// succeeded, each element in the batch's order.
func TestSuccessSettleReadsItsBatchOnceForItsEvents(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 4 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("se-%d", i), Queue: "se", Kind: []string{"a", "b"}[i%2], State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{}`), Attributes: map[string]string{"i": fmt.Sprint(i)}, RunAt: at, CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Queue: "se", WorkerID: "w-se", Max: 4, Now: at, Lease: time.Minute})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	var ids, execs []string
	var done []time.Time
	for i, c := range claimed {
		ids, execs = append(ids, c.ID), append(execs, c.ExecutionID)
		done = append(done, at.Add(time.Duration(i+1)*time.Second))
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var raw string
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sqlSettleSucceeded, textArray(ids), textArray(execs), timeArray(done),
		make([]bool, 4), make([]int32, 4), make([]int32, 4), "actor-se").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plans []map[string]any
	if err := json.Unmarshal([]byte(raw), &plans); err != nil {
		t.Fatal(err)
	}
	plan, _ := plans[0]["Plan"].(map[string]any)
	if n := cteScans(plan, "settled"); n != 3 {
		t.Errorf("the success settle scans its updated rows %d times, want 3 (the answer, the count, both event rows at once)", n)
	}

	rows, err := tx.Query(ctx, `SELECT type, seq, time, times, subjects, queues, kinds, attributes::text, bodies::text, actor FROM backstop_events
		WHERE subjects @> ARRAY['se-0'] AND type IN ('task.started', 'task.succeeded') ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type evRow struct {
		typ           string
		seq           int64
		time          time.Time
		times         []time.Time
		subjects      []string
		queues, kinds []string
		attrs, bodies string
		actor         *string
	}
	var got []evRow
	for rows.Next() {
		var r evRow
		if err := rows.Scan(&r.typ, &r.seq, &r.time, &r.times, &r.subjects, &r.queues, &r.kinds, &r.attrs, &r.bodies, &r.actor); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	rows.Close()
	if len(got) != 2 || got[0].typ != "task.started" || got[1].typ != "task.succeeded" || got[1].seq != got[0].seq+1 {
		t.Fatalf("event rows %+v, want task.started then task.succeeded, consecutive", got)
	}
	for _, r := range got {
		order, want := slices.Clone(r.subjects), slices.Clone(ids)
		slices.Sort(order)
		slices.Sort(want)
		if !reflect.DeepEqual(order, want) {
			t.Errorf("%s subjects %v, want the batch's %v", r.typ, r.subjects, ids)
		}
		if !reflect.DeepEqual(r.subjects, got[0].subjects) || !reflect.DeepEqual(r.queues, got[0].queues) ||
			!reflect.DeepEqual(r.kinds, got[0].kinds) || r.attrs != got[0].attrs || r.actor == nil || *r.actor != "actor-se" {
			t.Errorf("%s: subjects, queues, kinds, attributes or actor differ from task.started's: %+v", r.typ, r)
		}
		if len(r.times) != 4 {
			t.Errorf("%s: %d times, want 4", r.typ, len(r.times))
		}
		for i, id := range r.subjects {
			k := slices.Index(ids, id)
			var attrs []map[string]string
			if err := json.Unmarshal([]byte(r.attrs), &attrs); err != nil || attrs[i]["i"] != fmt.Sprint(k) {
				t.Errorf("%s: element %d (%s) has attributes %v (%v), want its task's", r.typ, i, id, attrs, err)
			}
			if r.kinds[i] != []string{"a", "b"}[k%2] {
				t.Errorf("%s: element %d (%s) has kind %s", r.typ, i, id, r.kinds[i])
			}
			if r.typ == "task.succeeded" && !r.times[i].Equal(done[k]) {
				t.Errorf("task.succeeded: element %d (%s) at %v, want %v", i, id, r.times[i], done[k])
			}
		}
	}
	if !got[1].time.Equal(done[3]) {
		t.Errorf("task.succeeded at %v, want the last finish %v", got[1].time, done[3])
	}
}
