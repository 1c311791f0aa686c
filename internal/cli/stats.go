package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

func init() { register(statsCmd) }

func statsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Rows per queue and state, dead letters by status and reason, oldest work, table sizes",
		Long: `stats reads a snapshot of the store: how many tasks each queue holds in
each state, the dead letters by status and reason, how long the oldest
claimable task has waited and the oldest running attempt has held its lease,
the size of each Backstop table (Postgres: pg_total_relation_size, with
indexes and TOAST; SQLite: from the dbstat table when the build has it) and
of the whole database, and who leads maintenance. A SQLite build without
dbstat cannot measure a table alone: the table leaves those rows out and says
so in one line (JSON keeps them with "bytes": -1); the file's size is exact.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, c, err := a.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer s.Close()
			st, err := c.Stats(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(st, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "QUEUE\tSTATE\tTASKS")
				for _, r := range st.Tasks {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", r.Queue, r.State, r.Count)
				}
				fmt.Fprintln(tw)
				fmt.Fprintln(tw, "DLQ_STATUS\tREASON\tDEAD_LETTERS")
				for _, r := range st.DeadLetters {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", r.Status, r.Reason, r.Count)
				}
				fmt.Fprintln(tw)
				fmt.Fprintf(tw, "oldest pending\t%s\n", fmtAge(st.OldestPendingRunAt != nil, time.Duration(st.OldestPendingAge)))
				fmt.Fprintf(tw, "oldest running\t%s\n", fmtAge(st.OldestRunningSince != nil, time.Duration(st.OldestRunningAge)))
				for _, l := range st.Leaders {
					state := "until " + fmtTime(l.ExpiresAt)
					if !l.ExpiresAt.After(st.At) {
						state = "expired " + fmtTime(l.ExpiresAt)
					}
					fmt.Fprintf(tw, "leader %s\t%s (since %s, %s)\n", l.Name, l.LeaderID, fmtTime(l.ElectedAt), state)
				}
				fmt.Fprintln(tw)
				fmt.Fprintln(tw, "TABLE\tBYTES")
				unmeasured := 0
				for _, t := range st.Tables {
					if t.Bytes < 0 { // this driver cannot measure the table alone
						unmeasured++
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\n", t.Table, fmtBytes(t.Bytes))
				}
				if unmeasured > 0 {
					fmt.Fprintf(tw, "(%d tables)\tnot measured one by one: this SQLite build has no dbstat table\n", unmeasured)
				}
				fmt.Fprintf(tw, "database (%s)\t%s\n", st.Driver, fmtBytes(st.DatabaseBytes))
				return tw.Flush()
			})
		},
	}
}

func fmtAge(some bool, d time.Duration) string {
	if !some {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// fmtBytes prints a size in IEC units; negative is "n/a" (not measurable).
func fmtBytes(n int64) string {
	if n < 0 {
		return "n/a"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
