package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
)

func benchFloorCmd(a *app) *cobra.Command {
	var (
		fcfg      bench.FloorConfig
		runs      int
		floorOnly bool
		workers   int
	)
	cmd := &cobra.Command{
		Use:   "floor [-n N] [--runs R] [--batch B] [--claimers C] [--workers W] [--payload JSON] [--floor-only]",
		Short: "Measure the database's floor for a drain and a batch enqueue, against Backstop's",
		Long: `floor measures what the database of --db does with nothing of Backstop's around it,
on a minimal table of its own (Postgres: a schema of its own; SQLite: a table in the
same file), created for the run and dropped after it:

  enqueue floor: insert N rows (Postgres: COPY, a batch per COPY; SQLite: a prepared
      INSERT per row, a transaction per batch).
  drain floor: claim --batch pending rows (Postgres: FOR UPDATE SKIP LOCKED, --claimers
      at once), then mark the batch done with one UPDATE, until none is left.

Then it runs Backstop's own drain of N tasks (as backstop bench -n N: batch enqueue,
then one worker of --workers), and repeats both --runs times in turn. Backstop's tasks
stay in the database (a private queue per run): point it at a scratch one.

A line per run, then the last line:
  floor: runs=<r> drain_ratio_median=<backstop/floor> drain_ratios=<per run> enqueue_ratio_median=<..> enqueue_ratios=<..>
With --floor-only, only the floors run; a line per run:
  floor: run=<i> store=<s> n=<n> drain=<rate>/s enqueue(<how>)=<rate>/s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fcfg.N < 1 || runs < 1 || fcfg.Batch < 1 || fcfg.Claimers < 1 || workers < 1 {
				return usageErr("bench floor: -n, --runs, --batch, --claimers and --workers must be positive")
			}
			ctx := cmd.Context()
			log := slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			s, c, err := a.open(ctx, &backstop.Config{Logger: log})
			if err != nil {
				return err
			}
			defer s.Close()
			if floorOnly {
				for i := range runs {
					f, err := bench.Floor(ctx, s, fcfg)
					if err != nil {
						return err
					}
					fmt.Fprintf(a.stdout, "floor: run=%d store=%s n=%d drain=%.0f/s enqueue(%s)=%.0f/s\n",
						i+1, f.Store, f.N, f.DrainPerSec(), f.EnqueueHow, f.EnqueuePerSec())
				}
				return nil
			}
			_, err = bench.CompareFloor(ctx, c, s, runs, fcfg, bench.Config{Workers: workers, Batch: fcfg.Batch}, a.stdout)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVarP(&fcfg.N, "n", "n", 100_000, "rows (and Backstop tasks) per run")
	f.IntVar(&runs, "runs", 3, "interleaved runs of the floor and Backstop")
	f.IntVar(&fcfg.Batch, "batch", 1000, "rows per claim, per complete and per enqueue batch")
	f.IntVar(&fcfg.Claimers, "claimers", 4, "Postgres: claim loops at once (SQLite has one writer)")
	f.IntVar(&workers, "workers", 2000, "Backstop's worker concurrency, as backstop bench --workers")
	f.BoolVar(&floorOnly, "floor-only", false, "run only the floors")
	f.Var(payloadFlag{&fcfg.Payload}, "payload", "every row's and task's payload, a JSON object (default: none, {})")
	return cmd
}
