package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestOrderingSimulation(t *testing.T) {
	cfg := OrderingConfig{Keys: 40, Minutes: 20, Workers: 4, LateFraction: 0.1, LostFraction: 0.02, Seed: 7}
	run := func() *OrderingResult {
		cfg.Dir = t.TempDir()
		r, err := RunOrdering(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := run()
	var sb strings.Builder
	a.Off.Report(&sb)
	a.On.Report(&sb)
	t.Logf("\n%s%s", sb.String(), a.Summary())
	if a.On.Detectable == 0 || a.Off.FalseMisses == 0 {
		t.Fatalf("the workload has no lost or late results to measure: %+v", a)
	}
	if a.On.TrueMisses != a.On.Detectable {
		t.Fatalf("true miss recall: %d of %d lost results reported", a.On.TrueMisses, a.On.Detectable)
	}
	if a.On.FalseMisses >= a.Off.FalseMisses {
		t.Fatalf("ordering did not reduce false misses: off %d, on %d", a.Off.FalseMisses, a.On.FalseMisses)
	}
	if b := run(); *b != *a {
		t.Fatalf("not deterministic:\n%+v\n%+v", a, b)
	}
	// With a first hold longer than a late result trails its successor,
	// no key's first result is dropped behind its second.
	cfg.FirstHold = 70 * time.Second
	h := run()
	if h.On.FirstHeld == 0 || h.On.FirstHold != cfg.FirstHold {
		t.Fatalf("first hold not applied: %+v", h.On)
	}
	if h.On.FalseMisses > a.On.FalseMisses || h.On.TrueMisses != h.On.Detectable {
		t.Fatalf("first hold: false misses %d (without %d), recall %d/%d", h.On.FalseMisses, a.On.FalseMisses,
			h.On.TrueMisses, h.On.Detectable)
	}
	if h.Off != a.Off {
		t.Fatalf("the unordered run changed with the first hold:\n%+v\n%+v", a.Off, h.Off)
	}
}
