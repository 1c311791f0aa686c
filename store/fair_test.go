package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFairSharesMatchOrder: the shares a fair claim reads are exactly what
// FairOrder would pick from every claimable task, whatever the lines,
// passes, weights and claim size.
func TestFairSharesMatchOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		f := FairQueue{Weights: map[string]int{}}
		passes := map[string]float64{}
		var lines []FairLine
		var cands []FairCandidate
		var values []string
		for v := range 1 + r.IntN(6) {
			value := fmt.Sprint("v", v)
			values = append(values, value)
			if r.IntN(2) == 0 {
				f.Weights[value] = 1 + r.IntN(3)
			}
			if r.IntN(3) > 0 {
				passes[value] = float64(r.IntN(8)) / 2
			}
			for _, pr := range []int{0, 5} {
				n := r.IntN(5)
				if n == 0 {
					continue
				}
				lines = append(lines, FairLine{Priority: pr, Value: value, N: n})
				for k := range n {
					cands = append(cands, FairCandidate{ID: fmt.Sprint(value, "/", pr, "/", k+1), Priority: pr, Value: value, Rank: k + 1})
				}
			}
		}
		base := FairBase(values, passes)
		max := 1 + r.IntN(12)
		want := map[FairLine]int{}
		order := FairOrder(f, cands, passes, base)
		for _, c := range order[:min(max, len(order))] {
			want[FairLine{Priority: c.Priority, Value: c.Value}]++
		}
		got := FairShares(f, lines, passes, base, max)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: shares %v, want %v (lines %v, passes %v, weights %v, max %d)", round, got, want, lines, passes, f.Weights, max)
		}
	}
}
