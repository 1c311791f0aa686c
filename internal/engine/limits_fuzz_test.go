package engine

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// FuzzValidateLimit: any input is accepted or refused with a
// *ValidationError naming one of the limit's fields, never a panic; an
// accepted limit has valid names and a concurrency in range.
func FuzzValidateLimit(f *testing.F) {
	f.Add("heavy5", "billing", "charge", "tenant", 5)
	f.Add("", "q", "", "", 1)
	f.Add("a", "bad queue!", "", "", 1)
	f.Add("a", "q", "k", "a b", 1)
	f.Add("a", "q", "", "", 0)
	f.Add("a", "q", "", "", 1_000_001)
	f.Add("a\x00", "q", "", "x.y-z_", -3)
	f.Fuzz(func(t *testing.T, name, queue, kind, per string, n int) {
		l := Limit{Name: name, Queue: queue, Kind: kind, Per: per, Concurrency: n}
		err := ValidateLimit(l)
		if err != nil {
			ve, ok := err.(*ValidationError)
			if !ok || !strings.Contains("name queue kind per concurrency", ve.Field) || ve.Field == "" {
				t.Fatalf("%+v: %v is not a ValidationError naming a field", l, err)
			}
			return
		}
		if ValidName(name) != nil || ValidName(queue) != nil || n < 1 || n > MaxLimitConcurrency ||
			(per != "" && !ValidAttrKey(per)) || (kind != "" && ValidName(kind) != nil) {
			t.Fatalf("%+v accepted", l)
		}
		_ = LimitWaitText(l, "v", n)
		_ = LimitScope(l)
	})
}

// FuzzAdmitWithinLimits: whatever the candidates, the budgets' running
// counts and two overlapping limits (the queue's, per tenant, and a kind's),
// every admitted task had room in each of its budgets when admitted, and a
// task is refused only when one of its budgets was full.
func FuzzAdmitWithinLimits(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 1, 2, 3}, uint8(2), uint8(3), uint8(1))
	f.Add([]byte{5, 5, 5, 5}, uint8(1), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, cands []byte, perTenant, kindN, already uint8) {
		if perTenant == 0 || kindN == 0 || len(cands) > 200 {
			return
		}
		limits := []store.Limit{
			{Name: "tenant", Queue: "q", Per: "tenant", Concurrency: int(perTenant)},
			{Name: "heavy", Queue: "q", Kind: "heavy", Concurrency: int(kindN)},
		}
		running := map[store.Budget]int{{Limit: "tenant", Value: "t0"}: int(already % 8)}
		start := map[store.Budget]int{}
		for k, v := range running {
			start[k] = v
		}
		var cs []store.LimitCandidate
		for i, c := range cands {
			kind := "light"
			if c&1 == 1 {
				kind = "heavy"
			}
			cs = append(cs, store.LimitCandidate{ID: string(rune('a'+i%26)) + strings.Repeat("x", i/26), Kind: kind,
				Attrs: map[string]string{"tenant": "t" + string(rune('0'+int(c>>1)%4))}})
		}
		admitted := map[string]bool{}
		for _, id := range store.AdmitWithinLimits("q", limits, running, cs) {
			admitted[id] = true
		}
		// Replay in order: each admitted task had room, each refused one did not.
		seen := start
		for _, c := range cs {
			room := true
			for _, l := range limits {
				if l.Applies("q", c.Kind) && seen[store.Budget{Limit: l.Name, Value: l.Value(c.Attrs)}] >= l.Concurrency {
					room = false
				}
			}
			if room != admitted[c.ID] {
				t.Fatalf("task %s (%s, %v): admitted %v, room %v", c.ID, c.Kind, c.Attrs, admitted[c.ID], room)
			}
			if room {
				for _, l := range limits {
					if l.Applies("q", c.Kind) {
						seen[store.Budget{Limit: l.Name, Value: l.Value(c.Attrs)}]++
					}
				}
			}
		}
	})
}
