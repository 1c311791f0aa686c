package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/bench"
)

func benchOrderingCmd(a *app) *cobra.Command {
	cfg := bench.OrderingConfig{Keys: 1000, Minutes: 60, Workers: 8, LateFraction: 0.05, LostFraction: 0.005, Seed: 1,
		FirstHold: 70 * time.Second}
	cmd := &cobra.Command{
		Use:   "ordering [--keys N] [--minutes M] [--workers W] [--late-fraction F] [--lost-fraction L] [--seed S] [--first-hold D]",
		Short: "Simulate ordered processing (seed 001) with ordering off and on",
		Long: `ordering runs a deterministic simulation on the real client and a SQLite store in a
temporary directory, with an injected clock (nothing sleeps): --keys subscriptions each
produce one result per simulated minute for --minutes; each reaches the queue after a
random delivery delay, a --late-fraction of them late enough (65-125 s) to overtake the
next one, a --lost-fraction never. The processor records a "missed" result for every
sequence it sees skipped or is told was skipped (Gaps). The same workload runs with
ordering off and on (step 1, default backoff and circuit breaker, --first-hold: a key
without state buffers its first result this long, so a late minute 0 is not dropped as
stale behind minute 1; 0 turns it off); each prints handled,
false misses (reported missing but did arrive), true misses reported / detectable lost
results, timeouts, circuit breaker trips, buffered tasks, mean/max buffer size and the
p50/p99 added delay. See docs/ordering.md.

The last line is:
  ordering: false_miss_reduction=<percent> true_miss_recall=<percent> timeout_rate=<percent> circuit_breaker_rate=<percent>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Keys < 1 || cfg.Minutes < 1 || cfg.Workers < 1 {
				return usageErr("bench ordering: --keys, --minutes and --workers must be positive")
			}
			if cfg.FirstHold < 0 {
				return usageErr("bench ordering: --first-hold must not be negative")
			}
			if cfg.LateFraction < 0 || cfg.LostFraction < 0 || cfg.LateFraction+cfg.LostFraction > 1 {
				return usageErr("bench ordering: --late-fraction and --lost-fraction must be in [0,1] and sum to at most 1")
			}
			dir, err := os.MkdirTemp("", "backstop-bench-ordering-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg.Dir = dir
			res, err := bench.RunOrdering(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			res.Off.Report(a.stdout)
			res.On.Report(a.stdout)
			_, err = a.stdout.Write([]byte(res.Summary() + "\n"))
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "subscriptions (ordering keys)")
	f.IntVar(&cfg.Minutes, "minutes", cfg.Minutes, "simulated minutes (one result per key per minute)")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent consumers")
	f.Float64Var(&cfg.LateFraction, "late-fraction", cfg.LateFraction, "fraction of results delivered late enough to overtake")
	f.Float64Var(&cfg.LostFraction, "lost-fraction", cfg.LostFraction, "fraction of results never delivered")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed (same seed, same output)")
	f.DurationVar(&cfg.FirstHold, "first-hold", cfg.FirstHold, "the ordered run's first_hold (0: off)")
	return cmd
}
