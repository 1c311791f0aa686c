package pgstore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// copySize is the length of a batch's COPY stream or a little more (a
// NULL jsonb is counted with its version byte), so that the stream is
// written into a buffer that does not grow.
func TestCopySize(t *testing.T) {
	at := time.Date(2026, 11, 28, 2, 3, 4, 5, time.UTC)
	full := &bt.Task{ID: "id-é", Queue: "q", Kind: "k", State: bt.StatePending, Payload: json.RawMessage(`{"a": "` + strings.Repeat("b", 5000) + `"}`),
		Attributes: map[string]string{"a": "b"}, Retry: &bt.RetryPolicy{Base: bt.Duration(time.Second)}, RunAt: at, CreatedAt: at, UpdatedAt: at,
		Deadline: &at, IdempotencyKey: "i", MergeKey: "m", TraceParent: "t", ReplayedFrom: "r"}
	bare := &bt.Task{ID: "x", Queue: "q", Kind: "k", State: bt.StateScheduled}
	for _, c := range []struct {
		name  string
		tasks []*bt.Task
		slack int // per task
	}{{"full", []*bt.Task{full, full}, 0}, {"bare", []*bt.Task{bare, bare, bare}, 2*1 + 8}, {"spilled", []*bt.Task{full}, 0}} {
		var batch []row
		for _, tk := range c.tasks {
			limit := 0
			if c.name == "spilled" {
				limit = 100
			}
			r, err := newRow(tk, limit)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, r)
		}
		data, err := copyRows(nil, batch, 7)
		if err != nil {
			t.Fatal(err)
		}
		size := copySize(batch)
		if size < len(data) || size > len(data)+len(batch)*c.slack {
			t.Errorf("%s: copySize %d, the stream %d bytes", c.name, size, len(data))
		}
		again, err := copyRows(make([]byte, 3, 10), batch, 7) // appended to what the buffer holds
		if err != nil {
			t.Fatal(err)
		}
		if string(again[3:]) != string(data) {
			t.Errorf("%s: the stream appended to a buffer differs", c.name)
		}
	}
}

// storedBatch is stored of each row.
func TestStoredBatch(t *testing.T) {
	at := time.Date(2026, 11, 28, 2, 3, 4, 5, time.FixedZone("x", 3600))
	var batch []row
	for i, p := range []json.RawMessage{nil, {}, json.RawMessage(`{"a": 1}`), json.RawMessage(`[` + strings.Repeat("1,", 100) + `1]`)} {
		tk := &bt.Task{ID: "t" + string(rune('a'+i)), Queue: "q", Kind: "k", State: bt.StatePending, Payload: p, RunAt: at, CreatedAt: at, UpdatedAt: at,
			Attributes: map[string]string{"a": "b"}, Retry: &bt.RetryPolicy{Base: bt.Duration(time.Second)}, Deadline: &at, Timeout: bt.Duration(1500 * time.Nanosecond)}
		r, err := newRow(tk, 50)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, r)
	}
	got := storedBatch(batch)
	for i, r := range batch {
		want := r.stored()
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("row %d:\nstoredBatch %+v\nstored      %+v", i, got[i], want)
		}
		if (got[i].Payload == nil) != (r.task.Payload == nil) {
			t.Errorf("row %d: payload nil %v, the task's nil %v", i, got[i].Payload == nil, r.task.Payload == nil)
		}
		if cap(got[i].Payload) != len(got[i].Payload) {
			t.Errorf("row %d: payload capacity %d past its length %d", i, cap(got[i].Payload), len(got[i].Payload))
		}
	}
}
