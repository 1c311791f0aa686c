package engine

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// FuzzValidateLimit: any input is accepted or refused with a
// *ValidationError naming one of the limit's fields, never a panic; an
// accepted limit has valid names and either a concurrency or a rate and
// burst in range.
func FuzzValidateLimit(f *testing.F) {
	f.Add("heavy5", "billing", "charge", "tenant", 5, 0.0, 0)
	f.Add("", "q", "", "", 1, 0.0, 0)
	f.Add("a", "bad queue!", "", "", 1, 0.0, 0)
	f.Add("a", "q", "k", "a b", 1, 0.0, 0)
	f.Add("a", "q", "", "", 0, 0.0, 0)
	f.Add("a", "q", "", "", 1_000_001, 0.0, 0)
	f.Add("a\x00", "q", "", "x.y-z_", -3, 0.0, 0)
	f.Add("mail100", "mail", "", "", 0, 100.0, 100)
	f.Add("slow", "q", "", "tenant", 0, 0.5, 0)
	f.Add("both", "q", "", "", 3, 2.0, 2)
	f.Add("nan", "q", "", "", 0, math.NaN(), 1)
	f.Add("inf", "q", "", "", 0, math.Inf(1), 1)
	f.Add("burst", "q", "", "", 0, 0.0, 5)
	f.Fuzz(func(t *testing.T, name, queue, kind, per string, n int, rate float64, burst int) {
		l := LimitDefaults(Limit{Name: name, Queue: queue, Kind: kind, Per: per, Concurrency: n, Rate: rate, Burst: burst})
		err := ValidateLimit(l)
		if err != nil {
			ve, ok := err.(*ValidationError)
			if !ok || !strings.Contains("name queue kind per concurrency rate burst", ve.Field) || ve.Field == "" {
				t.Fatalf("%+v: %v is not a ValidationError naming a field", l, err)
			}
			return
		}
		concurrency := n >= 1 && n <= MaxLimitConcurrency && rate == 0 && l.Burst == 0
		rated := n == 0 && rate >= MinLimitRate && rate <= MaxLimitRate && l.Burst >= 1 && l.Burst <= MaxLimitBurst
		if ValidName(name) != nil || ValidName(queue) != nil || !(concurrency || rated) ||
			(per != "" && !ValidAttrKey(per)) || (kind != "" && ValidName(kind) != nil) {
			t.Fatalf("%+v accepted", l)
		}
		_ = LimitWaitText(l, "v", n)
		_ = LimitScope(l)
	})
}

// FuzzAdmitWithinLimits: whatever the candidates, the budgets' running
// counts and tokens and three overlapping limits (the queue's, per tenant;
// a kind's; a rate limit per tenant), every admitted task had room in each
// of its budgets when admitted (a slot, a whole token), and a task is
// refused only when one of its budgets was full.
func FuzzAdmitWithinLimits(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 1, 2, 3}, uint8(2), uint8(3), uint8(1), uint8(9), uint8(3))
	f.Add([]byte{5, 5, 5, 5}, uint8(1), uint8(1), uint8(0), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, cands []byte, perTenant, kindN, already, burst, tokens uint8) {
		if perTenant == 0 || kindN == 0 || burst == 0 || len(cands) > 200 {
			return
		}
		limits := []store.Limit{
			{Name: "rate", Queue: "q", Per: "tenant", Rate: 1, Burst: int(burst)},
			{Name: "tenant", Queue: "q", Per: "tenant", Concurrency: int(perTenant)},
			{Name: "heavy", Queue: "q", Kind: "heavy", Concurrency: int(kindN)},
		}
		now := time.Unix(1e9, 0)
		bs := store.NewBudgets(now)
		bs.Running[store.Budget{Limit: "tenant", Value: "t0"}] = int(already % 8)
		// t1's bucket was stored a second ago with tokens/4 tokens.
		bs.Buckets[store.Budget{Limit: "rate", Value: "t1"}] = store.Bucket{Tokens: float64(tokens) / 4, At: now.Add(-time.Second)}
		start := map[store.Budget]int{}
		for k, v := range bs.Running {
			start[k] = v
		}
		left := map[string]int{"t0": int(burst), "t1": min(int(burst), int(float64(tokens)/4+1)), "t2": int(burst), "t3": int(burst)}
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
		for _, id := range store.AdmitWithinLimits("q", limits, bs, cs) {
			admitted[id] = true
		}
		// Replay in order: each admitted task had room, each refused one did not.
		seen := start
		for _, c := range cs {
			room := left[c.Attrs["tenant"]] >= 1
			for _, l := range limits {
				if l.Rate == 0 && l.Applies("q", c.Kind) && seen[store.Budget{Limit: l.Name, Value: l.Value(c.Attrs)}] >= l.Concurrency {
					room = false
				}
			}
			if room != admitted[c.ID] {
				t.Fatalf("task %s (%s, %v): admitted %v, room %v", c.ID, c.Kind, c.Attrs, admitted[c.ID], room)
			}
			if room {
				left[c.Attrs["tenant"]]--
				for _, l := range limits {
					if l.Applies("q", c.Kind) {
						seen[store.Budget{Limit: l.Name, Value: l.Value(c.Attrs)}]++
					}
				}
			}
		}
	})
}
