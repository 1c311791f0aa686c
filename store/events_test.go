package store

import (
	"errors"
	"strings"
	"testing"
)

func TestParseStream(t *testing.T) {
	for in, want := range map[string]Stream{
		"":                       {Kind: StreamAll},
		"all":                    {Kind: StreamAll},
		"type.task.enqueued":     {Kind: StreamType, Value: "task.enqueued"},
		"task.0192-abc":          {Kind: StreamTask, Value: "0192-abc"},
		"queue.mail.high":        {Kind: StreamQueue, Value: "mail.high"},
		"run.r 1":                {Kind: StreamRun, Value: "r 1"},
		"worker.host:1234/abc-1": {Kind: StreamWorker, Value: "host:1234/abc-1"},
		"node.db-1.example.com":  {Kind: StreamNode, Value: "db-1.example.com"},
		"execution.0193-ab":      {Kind: StreamExecution, Value: "0193-ab"},
	} {
		got, err := ParseStream(in)
		if err != nil || got != want {
			t.Errorf("ParseStream(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil && in != "" && got.String() != in {
			t.Errorf("String() of %q = %q", in, got.String())
		}
	}
	for _, in := range []string{"nope", "all.x", "task.", "type.Task.X", "type.a b", "queue.a\nb", "run." + strings.Repeat("x", MaxStreamValue+1), "queue.\xff", "x.y", "node.", "execution."} {
		if _, err := ParseStream(in); !errors.Is(err, ErrBadStream) {
			t.Errorf("ParseStream(%q): %v, want ErrBadStream", in, err)
		}
	}
}

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]Cursor{"": {}, "0": {}, "17": {Seq: 17}, "5-17": {Xid: 5, Seq: 17}, "0-3": {Seq: 3}, "5-17-2": {Xid: 5, Seq: 17, Idx: 2}, "0-3-0": {Seq: 3}} {
		got, err := ParseCursor(in)
		if err != nil || got != want {
			t.Errorf("ParseCursor(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-1", "1-", "-", "1-2-3-4", "1--3", "1-2-", "+1", " 1", "99999999999999999999", "9223372036854775808", "1.5", "0x10"} {
		if _, err := ParseCursor(in); !errors.Is(err, ErrBadCursor) {
			t.Errorf("ParseCursor(%q): %v, want ErrBadCursor", in, err)
		}
	}
	if !(Cursor{Xid: 1, Seq: 9}).Less(Cursor{Xid: 2, Seq: 1}) || (Cursor{Xid: 2, Seq: 1}).Less(Cursor{Xid: 1, Seq: 9}) {
		t.Error("Less must order by xid first")
	}
	if !(Cursor{Xid: 1, Seq: 9, Idx: 3}).Less(Cursor{Xid: 1, Seq: 9, Idx: 4}) || !(Cursor{Xid: 1, Seq: 8, Idx: 9}).Less(Cursor{Xid: 1, Seq: 9, Idx: 1}) {
		t.Error("Less must order by seq, then the event's place in its row")
	}
}

func FuzzParseStream(f *testing.F) {
	for _, s := range []string{"", "all", "type.task.enqueued", "task.x", "queue.q", "run.r", "worker.w", "nope", "task.", "type.A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStream(s)
		if err != nil {
			if !errors.Is(err, ErrBadStream) {
				t.Fatalf("%q: error %v does not wrap ErrBadStream", s, err)
			}
			return
		}
		// A valid stream prints back to a name that parses to itself.
		again, err := ParseStream(st.String())
		if err != nil || again != st {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, st, st.String(), again, err)
		}
	})
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "0", "17", "5-17", "5-17-3", "x", "1-2-3-4", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("%q: error %v does not wrap ErrBadCursor", s, err)
			}
			return
		}
		again, err := ParseCursor(c.String())
		if err != nil || again != c {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, c, c.String(), again, err)
		}
	})
}
