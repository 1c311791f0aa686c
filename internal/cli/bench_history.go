package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
)

// benchHistory holds `backstop bench --history`'s flags: a drain against a
// database already holding finished tasks (internal/bench/history.go).
type benchHistory struct {
	on         bool
	cfg        bench.HistoryConfig
	probe      int
	retriedPct int
}

const benchHistoryHelp = `
  history (--history N, with drain mode): first write N succeeded tasks with their
      events (and an execution row for every --history-retried-every-th, which
      failed once first) straight into the tables, in bulk, finished over the last
      23 hours (--history-expired: 25-48 hours ago, what retention deletes), in
      the run's queue; then the drain; --retain runs one retention round
      (succeeded older than 24h) alongside it; then the probe: --probe tasks
      claimed --probe-batch at a time and settled by one caller, each claim
      and settle timed. --history 0 is the empty-history baseline (drain and
      probe only). Before the summary:
  history: rows=<filled> db_bytes=<size> [claim_p50=.. claim_p99=.. settle_p50=.. settle_p99=..] [retain_deleted=.. retain_elapsed=..]`

func (h *benchHistory) register(f *pflag.FlagSet) {
	f.IntVar(&h.cfg.Rows, "history", 0, "history mode: finished tasks to fill before the drain (0: the empty baseline)")
	f.IntVar(&h.cfg.RetriedEvery, "history-retried-every", 10, "history: every n-th history task failed once first (an execution row); 0: none")
	f.BoolVar(&h.cfg.Expired, "history-expired", false, "history: finished before the 24h retention window instead of inside it")
	f.BoolVar(&h.cfg.Retain, "retain", false, "history: run one retention round (succeeded older than 24h) alongside the drain")
	f.IntVar(&h.probe, "probe", 2000, "history: tasks the claim/settle probe works after the drain (0: no probe)")
	f.IntVar(&h.cfg.ProbeBatch, "probe-batch", 10, "history: tasks per probe claim")
}

// check reads the flags after parsing: usage errors name the flag.
func (h *benchHistory) check(cmd *cobra.Command, cfg bench.Config) error {
	fs := cmd.Flags()
	h.on = fs.Changed("history")
	if !h.on {
		for _, name := range []string{"history-retried-every", "history-expired", "retain", "probe", "probe-batch"} {
			if fs.Changed(name) {
				return usageErr("bench: --%s needs --history", name)
			}
		}
		return nil
	}
	switch {
	case h.cfg.Rows < 0:
		return usageErr("bench: --history must not be negative")
	case cfg.Duration > 0:
		return usageErr("bench: --history needs drain mode (-n), not --duration")
	case cfg.FollowEvents:
		return usageErr("bench: --history and --follow-events do not combine")
	case h.cfg.RetriedEvery < 0 || h.probe < 0:
		return usageErr("bench: --history-retried-every and --probe must not be negative")
	case h.cfg.ProbeBatch < 1:
		return usageErr("bench: --probe-batch must be positive")
	}
	if h.cfg.RetriedEvery == 0 {
		h.cfg.RetriedEvery = -1
	}
	h.cfg.Probe = h.probe
	if h.probe == 0 {
		h.cfg.Probe = -1
	}
	return nil
}

func (a *app) benchHistory(ctx context.Context, s any, c *backstop.Client, cfg bench.Config, h *benchHistory) error {
	res, err := bench.RunHistory(ctx, c, s, cfg, h.cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, res.Summary())
	fmt.Fprintln(a.stdout, res.Drain.Summary())
	return nil
}
