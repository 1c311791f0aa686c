package filter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// listOf is a store's List over tasks (no where; AfterID and Limit
// honoured), blocking first when block is set until its context ends.
func listOf(tasks []*bt.Task, block bool) func(context.Context, store.ListFilter) ([]*bt.Task, error) {
	return func(ctx context.Context, f store.ListFilter) ([]*bt.Task, error) {
		if block {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		var out []*bt.Task
		for _, t := range tasks {
			if t.ID > f.AfterID && len(out) < f.Limit {
				out = append(out, t)
			}
		}
		return out, nil
	}
}

func listTasks(n int, payload string) []*bt.Task {
	var ts []*bt.Task
	for i := range n {
		ts = append(ts, &bt.Task{ID: fmt.Sprintf("t%05d", i), Payload: json.RawMessage(payload)})
	}
	return ts
}

// hundred is a payload holding a list of 100 numbers, none negative.
var hundred = func() string {
	var b strings.Builder
	b.WriteString(`{"L":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprint(&b, i)
	}
	b.WriteString(`]}`)
	return b.String()
}()

// TestBudgetCost: the cost of every task's evaluation adds up; a scan
// (and a count) whose sum passes the budget stops with a BudgetError naming
// the cost budget and its key, after few tasks, not at the end.
func TestBudgetCost(t *testing.T) {
	x, err := Compile(`payload.L.exists(a, payload.L.exists(b, b < 0 && a < 0))`)
	if err != nil {
		t.Fatal(err)
	}
	tasks := listTasks(2000, hundred)
	ctx := WithBudget(context.Background(), Budget{Cost: 200_000})
	_, err = Scan(ctx, x, store.ListFilter{Limit: 10}, listOf(tasks, false))
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrBudget) || be.Budget != "cost" || be.OneTask {
		t.Fatalf("scan: %v, want the cost budget spent", err)
	}
	if be.Evaluated >= len(tasks) || be.Evaluated == 0 || !strings.Contains(err.Error(), "limits.where_cost") {
		t.Fatalf("spent after %d tasks: %v", be.Evaluated, err)
	}
	// Each draws on the same kind of budget; a fresh one per context.
	n := 0
	err = Each(WithBudget(context.Background(), Budget{Cost: 200_000}), x, store.ListFilter{}, listOf(tasks, false), func(*bt.Task) error { n++; return nil })
	if !errors.As(err, &be) || be.Budget != "cost" {
		t.Fatalf("each: %v", err)
	}
	// Under the default budget a cheap where scans them all.
	cheap, _ := Compile(`payload.L.exists(a, a == 99)`)
	got, err := Scan(context.Background(), cheap, store.ListFilter{Limit: 5000}, listOf(tasks, false))
	if err != nil || len(got) != len(tasks) {
		t.Fatalf("cheap scan: %d, %v", len(got), err)
	}
}

// TestBudgetOneTask: the where, three exists deep over a
// 100-element list, passes the per-task limit on the first task: the
// request answers at once, naming the budget, instead of burning a
// million steps per task.
func TestBudgetOneTask(t *testing.T) {
	x, err := Compile(`payload.L.exists(a, payload.L.exists(b, payload.L.exists(c, c < 0)))`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Scan(context.Background(), x, store.ListFilter{Limit: 10}, listOf(listTasks(1000, hundred), false))
	var be *BudgetError
	if !errors.As(err, &be) || !be.OneTask || be.Evaluated != 0 || !strings.Contains(err.Error(), "cost budget") {
		t.Fatalf("scan: %v, want one task over the cost limit", err)
	}
	if x.Match([]byte(hundred), nil) {
		t.Fatal("a task over the limit matched")
	}
}

// TestBudgetTime: the time budget bounds the scan, its reads included (a
// read that would block is cut at the deadline): a BudgetError naming
// the time budget. A caller that goes away stops it with its own error.
func TestBudgetTime(t *testing.T) {
	x, _ := Compile(`payload.L.exists(a, a == 3)`)
	ctx := WithBudget(context.Background(), Budget{Time: 50 * time.Millisecond})
	_, err := Scan(ctx, x, store.ListFilter{Limit: 10}, listOf(nil, true))
	var be *BudgetError
	if !errors.As(err, &be) || be.Budget != "time" || !strings.Contains(err.Error(), "limits.where_time") {
		t.Fatalf("scan: %v, want the time budget spent", err)
	}
	err = Each(WithBudget(context.Background(), Budget{Time: 50 * time.Millisecond}), x, store.ListFilter{}, listOf(nil, true), func(*bt.Task) error { return nil })
	if !errors.As(err, &be) || be.Budget != "time" {
		t.Fatalf("each: %v", err)
	}

	gone, cancel := context.WithCancel(WithBudget(context.Background(), Budget{Time: time.Hour}))
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = Scan(gone, x, store.ListFilter{Limit: 10}, listOf(nil, true))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrBudget) {
		t.Fatalf("scan of a caller gone: %v, want context.Canceled", err)
	}
}

// TestEvalStopsWhenTheCallerGoes: an evaluation in progress stops when
// its context ends (CEL checks it inside comprehensions), with the
// context's error.
func TestEvalStopsWhenTheCallerGoes(t *testing.T) {
	x, _ := Compile(`payload.L.exists(a, payload.L.exists(b, payload.L.exists(c, c < 0)))`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := x.Eval(ctx, []byte(hundred), nil)
	if ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("eval under an ended context: %v %v", ok, err)
	}
}
