package workflowtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// RandomDefinition writes a random definition (YAML) named name, with
// queue q when not empty: 2 to 7 steps s<i> of kind k, random needs on
// earlier steps, some fanning out over input.xs (some of those with a
// concurrency of 1 or 2, and a budget of RandomBudget), some with when:
// input.flag, some with a when that fails to evaluate (half of those with
// on_when_error: treat_as_false), failure policies halt, continue or
// route:r<i> (the target
// r<i> needed by some later steps), compensations u<i>, and rollback
// on_fail half the time. Its input is RandomInput's.
func RandomDefinition(r *rand.Rand, name, q string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", name)
	if q != "" {
		fmt.Fprintf(&b, "queue: %s\n", q)
	}
	if r.IntN(2) == 0 {
		b.WriteString("rollback: on_fail\n")
	}
	b.WriteString("steps:\n")
	n := 2 + r.IntN(6)
	var extra []string
	routed := map[int]bool{}
	for i := range n {
		fmt.Fprintf(&b, "  - id: s%d\n    kind: k\n", i)
		var needs []string
		for j := range i {
			if r.IntN(3) == 0 {
				needs = append(needs, fmt.Sprintf("s%d", j))
				if routed[j] && r.IntN(2) == 0 {
					needs = append(needs, fmt.Sprintf("r%d", j))
				}
			}
		}
		switch r.IntN(5) {
		case 0:
			b.WriteString("    for_each: input.xs\n")
			if c := r.IntN(3); c > 0 {
				fmt.Fprintf(&b, "    concurrency: %d\n", c)
				if r.IntN(2) == 0 {
					fmt.Fprintf(&b, "    budget: %s\n", RandomBudget)
				}
			}
		case 1:
			if r.IntN(4) == 0 {
				// input has no key nope: the when fails to evaluate.
				b.WriteString("    when: input.nope == 1\n")
				if r.IntN(2) == 0 {
					b.WriteString("    on_when_error: treat_as_false\n")
				}
			} else {
				b.WriteString("    when: input.flag\n")
			}
		}
		switch r.IntN(4) {
		case 0:
			b.WriteString("    on_failure: continue\n")
		case 1:
			fmt.Fprintf(&b, "    on_failure: 'route:r%d'\n", i)
			extra = append(extra, fmt.Sprintf("  - {id: r%d, kind: k}\n", i))
			routed[i] = true
		}
		if len(needs) > 0 {
			fmt.Fprintf(&b, "    needs: [%s]\n", strings.Join(needs, ", "))
		}
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, "    compensate: u%d\n", i)
			extra = append(extra, fmt.Sprintf("  - {id: u%d, kind: k, compensation: true}\n", i))
		}
	}
	for _, e := range extra {
		b.WriteString(e)
	}
	return b.String()
}

// RandomBudget is the budget of RandomDefinition's for_each steps that
// have one.
const RandomBudget = "5m"

// RandomInput is an input for RandomDefinition's runs: xs of 0, 1 or 3
// items, flag mostly true.
func RandomInput(r *rand.Rand) string {
	return fmt.Sprintf(`{"xs":%s,"flag":%v}`, []string{`[]`, `[1]`, `[1,2,3]`}[r.IntN(3)], r.IntN(4) != 0)
}
