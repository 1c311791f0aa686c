package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/activity"
	"github.com/backstophq/backstop/internal/apiclient"
)

func init() { register(activityCmd) }

func activityCmd(a *app) *cobra.Command {
	var window, queue, kind string
	cmd := &cobra.Command{
		Use:   "activity [--window 24h|7d] [--queue Q] [--kind K]",
		Short: "Finished work over 24 h or 7 d: throughput, failure rate, wait and run latency, by queue and kind",
		Long: `activity reads the activity rollup the maintenance leader writes
(docs/observability.md, "Activity history"): over the last 24 h (five-minute
buckets) or 7 d (hourly buckets), the tasks that succeeded, the attempts that
failed and those retried, the tasks that died, the failure rate, and the wait
(availability to start) and run (start to end) latency p50 and p95, for the
window, each queue × kind, and each bucket with work. -o json prints every
bucket (GET /v1/activity?window=).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := activity.ParseWindow(window); err != nil {
				return usageErr("--window: %v", err)
			}
			rep, err := a.activityHistory(cmd.Context(), window, queue, kind)
			if err != nil {
				return err
			}
			return a.print(rep, func(w io.Writer) error { return printActivity(w, rep) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&window, "window", "24h", "24h (five-minute buckets) or 7d (hourly buckets)")
	f.StringVar(&queue, "queue", "", "this queue only")
	f.StringVar(&kind, "kind", "", "this kind only")
	return cmd
}

// activityHistory reads the rollup on the database or through the API.
func (a *app) activityHistory(ctx context.Context, window, queue, kind string) (*backstop.ActivityReport, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).ActivityHistory(ctx, window, queue, kind)
		if err != nil {
			return nil, remoteErr(err)
		}
		return r, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.ActivityHistory(ctx, window, queue, kind)
}

func printActivity(w io.Writer, rep *backstop.ActivityReport) error {
	rolled := "not rolled up yet"
	if rep.RolledUpTo != nil {
		rolled = "rolled up to " + fmtTime(*rep.RolledUpTo)
	}
	fmt.Fprintf(w, "window %s (%d s buckets) from %s until %s, %s\n\n", rep.Window, rep.BucketSeconds,
		fmtTime(rep.From), fmtTime(rep.Until), rolled)
	tw := newTable(w)
	head := "SUCCEEDED\tFAILED\tRETRIED\tDEAD\tFAILURE\tWAIT P50\tWAIT P95\tRUN P50\tRUN P95"
	row := func(f activity.Figures) string {
		return fmt.Sprintf("%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s", f.Succeeded, f.Failed, f.Retried, f.Dead,
			rate(f.FailureRate), millis(f.WaitP50), millis(f.WaitP95), millis(f.RunP50), millis(f.RunP95))
	}
	fmt.Fprintln(tw, "QUEUE\tKIND\t"+head)
	for _, g := range rep.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Queue, g.Kind, row(g.Figures))
	}
	fmt.Fprintf(tw, "(all)\t\t%s\n", row(rep.Totals))
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "BUCKET\t\t"+head)
	for _, p := range rep.Series {
		if p.Succeeded+p.Failed+p.Dead > 0 {
			fmt.Fprintf(tw, "%s\t\t%s\n", fmtTime(p.At), row(p.Figures))
		}
	}
	return tw.Flush()
}

func rate(r *float64) string {
	if r == nil {
		return "-"
	}
	return strconv.FormatFloat(*r*100, 'f', 1, 64) + "%"
}

func millis(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64) + "ms"
}
