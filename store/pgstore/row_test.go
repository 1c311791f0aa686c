package pgstore

import (
	"fmt"
	"testing"
)

// TestTaskScanMatchesColumns: scanTask has one destination per column
// taskCols selects.
func TestTaskScanMatchesColumns(t *testing.T) {
	if got, want := len(taskColumns)+2, taskScanColumns; got != want {
		t.Fatalf("taskCols selects %d columns, scanTask has %d destinations", got, want)
	}
	sc := taskScans.Get().(*taskScan)
	defer sc.release()
	for i, d := range sc.dest {
		if d == nil {
			t.Errorf("destination %d (%s) is nil", i, taskColumns[i])
		}
	}
}

func TestTextDest(t *testing.T) {
	var in textInterner
	var s string
	for _, d := range []textDest{{&s, nil}, {&s, &in}} {
		for _, c := range []struct {
			src  any
			want string
		}{{nil, ""}, {"", ""}, {"abc", "abc"}, {[]byte("xyz"), "xyz"}, {[]byte{}, ""}} {
			s = "before"
			if err := d.Scan(c.src); err != nil || s != c.want {
				t.Errorf("Scan(%#v) = %q, %v; want %q", c.src, s, err, c.want)
			}
		}
		s = "before"
		if err := d.ScanBytes(nil); err != nil || s != "" {
			t.Errorf("ScanBytes(nil) = %q, %v", s, err)
		}
		if err := d.Scan(42); err == nil {
			t.Error("Scan(42) did not fail")
		}
	}
}

// TestInterner: every lookup returns the bytes' string, whether it hits,
// misses or collides, and the bytes are not aliased.
func TestInterner(t *testing.T) {
	var in textInterner
	for round := range 3 {
		for i := range 1000 { // more values than slots: collisions
			b := []byte(fmt.Sprintf("queue-%d", i))
			got := in.get(b)
			b[0] = 'X'
			if want := fmt.Sprintf("queue-%d", i); got != want {
				t.Fatalf("round %d: get = %q, want %q", round, got, want)
			}
		}
	}
	long := make([]byte, 200)
	if got := in.get(long); got != string(long) {
		t.Error("long value changed")
	}
	b := []byte("kind")
	first := in.get(b)
	if allocs := testing.AllocsPerRun(100, func() { _ = in.get(b) }); allocs != 0 {
		t.Errorf("a repeated value allocates %.0f times", allocs)
	}
	if in.get(b) != first {
		t.Error("repeated value differs")
	}
}

// TestInternerKeepsCollidingValues: two values whose first slots collide
// are both kept (the second in its second slot), so reading them in turn,
// as a claim's rows do with their queue and worker id, allocates nothing.
// With one slot a value they evicted each other: 2 allocations a pair.
func TestInternerKeepsCollidingValues(t *testing.T) {
	slot := func(s string) (uint32, uint32) {
		h := uint32(2166136261)
		for _, c := range []byte(s) {
			h = (h ^ uint32(c)) * 16777619
		}
		return h % 256, (h >> 8) % 256
	}
	a := []byte("queue-a")
	fa, sa := slot(string(a))
	var b []byte
	for i := 0; b == nil; i++ {
		c := fmt.Sprintf("worker-%d", i)
		if f, s := slot(c); f == fa && s != sa && s != fa {
			b = []byte(c)
		}
	}
	var in textInterner
	in.get(a)
	in.get(b)
	allocs := testing.AllocsPerRun(100, func() {
		if in.get(a) != string(a) || in.get(b) != string(b) {
			t.Fatal("wrong value")
		}
	})
	if allocs != 0 {
		t.Errorf("two values sharing a first slot allocate %.0f times a pair, want 0", allocs)
	}
}
