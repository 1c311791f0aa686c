package filter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestEach: Each streams every match after the cursor, in order, across
// page boundaries (a last page exactly full, then an empty one), asks the
// list for pages without the where and with payloads, and stops at fn's
// error.
func TestEach(t *testing.T) {
	var tasks []*bt.Task
	for i := range 2 * scanPage {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("t%05d", i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	reads := 0
	list := func(_ context.Context, f store.ListFilter) ([]*bt.Task, error) {
		reads++
		if f.Where != "" || f.WithoutPayload || f.Limit != scanPage || f.Queue != "q" {
			t.Fatalf("list called with %+v", f)
		}
		i, _ := slices.BinarySearchFunc(tasks, f.AfterID, func(t *bt.Task, id string) int {
			if t.ID <= id {
				return -1
			}
			return 1
		})
		return tasks[i:min(i+f.Limit, len(tasks))], nil
	}
	x, err := Compile(`int(payload.n) % 7 == 0`)
	if err != nil || x.InSQL() {
		t.Fatal(err)
	}
	f := store.ListFilter{Queue: "q", Where: x.String(), WithoutPayload: true, Limit: 3, AfterID: "t00010"}
	var got, want []string
	for _, tk := range tasks[11:] {
		if x.Match(tk.Payload, nil) {
			want = append(want, tk.ID)
		}
	}
	if err := Each(context.Background(), x, f, list, func(tk *bt.Task) error {
		got = append(got, tk.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || reads != 2 {
		t.Fatalf("got %d matches in %d reads, want %d in 2", len(got), reads, len(want))
	}
	reads = 0
	f.AfterID = ""
	if err := Each(context.Background(), x, f, list, func(*bt.Task) error { return nil }); err != nil || reads != 3 {
		t.Fatalf("from the start: %v, %d reads, want 3 (the last one empty)", err, reads)
	}
	stop := errors.New("stop")
	n := 0
	if err := Each(context.Background(), x, f, list, func(*bt.Task) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) || n != 3 {
		t.Fatalf("fn's error: %v after %d", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Each(ctx, x, f, list, func(*bt.Task) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
}
