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

// The tasks FairWants has a claim read hold the claim's picks: the first
// max in FairOrder of what it read are the first max of the whole queue's.
func TestFairWantsMatchOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 2000 {
		f := FairQueue{Weights: map[string]int{}}
		passes := map[string]float64{}
		var all []FairCandidate
		var streams []FairStream
		full := map[string][]FairCandidate{}
		for v := range 1 + r.IntN(8) {
			value := fmt.Sprint("v", v)
			if r.IntN(2) == 0 {
				f.Weights[value] = 1 + r.IntN(3)
			}
			if r.IntN(3) > 0 {
				passes[value] = float64(r.IntN(8)) / 2
			}
			for _, pr := range []int{9, 5, 0} { // claim order: priority first
				for k := range r.IntN(4) {
					c := FairCandidate{ID: fmt.Sprint(value, "/", pr, "/", k+1), Priority: pr, Value: value, Rank: k + 1}
					full[value] = append(full[value], c)
					all = append(all, c)
				}
			}
			if len(full[value]) > 0 {
				streams = append(streams, FairStream{Value: value, Head: full[value][0].Priority})
			}
		}
		var values []string
		for _, s := range streams {
			values = append(values, s.Value)
		}
		base := FairBase(values, passes)
		max := 1 + r.IntN(12)
		reads := 0
		for {
			wants := FairWants(f, streams, passes, base, max)
			if len(wants) == 0 {
				break
			}
			if reads++; reads > 100 {
				t.Fatalf("round %d: no end to the reads", round)
			}
			for i, s := range streams {
				if n, ok := wants[s.Value]; ok {
					if n <= len(s.Tasks) {
						t.Fatalf("round %d: wants %d of %s, read %d already", round, n, s.Value, len(s.Tasks))
					}
					streams[i].Tasks = full[s.Value][:min(n, len(full[s.Value]))]
					streams[i].All = n >= len(full[s.Value])
				}
			}
		}
		var read []FairCandidate
		for _, s := range streams {
			read = append(read, s.Tasks...)
		}
		want := FairOrder(f, all, passes, base)
		got := FairOrder(f, read, passes, base)
		want, got = want[:min(max, len(want))], got[:min(max, len(got))]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: picks %v, want %v (passes %v, weights %v, max %d)", round, got, want, passes, f.Weights, max)
		}
	}
}
