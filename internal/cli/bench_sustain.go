package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
)

func benchSustainCmd(a *app) *cobra.Command {
	var cfg bench.SustainConfig
	cmd := &cobra.Command{
		Use:   "sustain [--duration D] [--interval I] [--hold-snapshot] [--explain] [--workers W] [--backlog B]",
		Short: "Measure a drain sustained for minutes, per interval, optionally behind an open snapshot",
		Long: `sustain drains no-op tasks for --duration while --producers keep --backlog tasks
waiting (enqueued, not yet handled), in a private queue as backstop bench does, and
prints the throughput of each --interval:

  sustain: interval=<i> length=<s>s worked=<n> jobs_per_sec=<rate> enqueued=<n> backlog_min=<n>
      [dead_tasks=<n> dead_all=<n>] [xmin_age=<n>]

backlog_min is the smallest backlog sampled in the interval (0: the worker may
have starved, so the producers, not the drain, set the rate). On Postgres,
dead_tasks and dead_all are n_dead_tup of backstop_tasks and of all tables of the
schema (pg_stat_user_tables).

--hold-snapshot (Postgres): before the run, a separate session begins a
REPEATABLE READ transaction and reads backstop_tasks, and keeps it open until
after the run: no row version the run makes dead can be removed. xmin_age is the
age of that session's backend_xmin; the run fails if the session's backend_xmin
moved or its transaction ended. SQLite has no such horizon: its readers see
snapshots of the WAL, and an open read only keeps checkpoints from recycling it.

--explain (Postgres): EXPLAIN (ANALYZE, BUFFERS) of the claim's pick (the part that
walks the claim index) from its head before the worker starts and after it
stopped, the snapshot still held; then the pick from where the worker's claims
ended (the claim cursor), which is what most of its claims ran.

The last line:
  sustain: store=<s> held_snapshot=<bool> worked=<n> elapsed=<s>s jobs_per_sec=<rate> first=<rate> last=<rate> last_over_first=<ratio>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Duration <= 0 || cfg.Interval <= 0 || cfg.Workers < 1 || cfg.Batch < 1 || cfg.Backlog < 1 || cfg.Producers < 1 {
				return usageErr("bench sustain: --duration, --interval, --workers, --batch, --backlog and --producers must be positive")
			}
			if (cfg.HoldSnapshot || cfg.Explain) && strings.HasPrefix(a.dbURL, "sqlite://") {
				return usageErr("bench sustain: --hold-snapshot and --explain need a Postgres --db (SQLite has no xmin horizon to hold back)")
			}
			ctx := cmd.Context()
			log := slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			s, c, err := a.open(ctx, &backstop.Config{Logger: log})
			if err != nil {
				return err
			}
			defer s.Close()
			cfg.Out = a.stdout
			res, err := bench.Sustain(ctx, c, s, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, res.Summary())
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long to drain")
	f.DurationVar(&cfg.Interval, "interval", time.Minute, "time between report lines")
	f.IntVar(&cfg.Workers, "workers", 2000, "worker concurrency, as backstop bench --workers")
	f.IntVar(&cfg.Batch, "batch", 1000, "tasks per enqueue batch")
	f.IntVar(&cfg.Backlog, "backlog", 20_000, "tasks the producers keep waiting")
	f.IntVar(&cfg.Producers, "producers", 2, "enqueue loops at once")
	f.BoolVar(&cfg.HoldSnapshot, "hold-snapshot", false, "Postgres: hold a REPEATABLE READ transaction open in another session for the whole run")
	f.BoolVar(&cfg.Explain, "explain", false, "Postgres: print EXPLAIN (ANALYZE, BUFFERS) of the claim's pick at the start and the end")
	return cmd
}
