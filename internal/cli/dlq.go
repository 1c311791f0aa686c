package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

func init() { register(dlqCmd) }

func dlqCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and operate the dead-letter queue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("dlq: name a subcommand: list, show, replay, redrive, discard, resolve, purge or export")
		},
	}
	cmd.AddCommand(dlqListCmd(a), dlqShowCmd(a), dlqReplayCmd(a), dlqRedriveCmd(a), dlqDiscardCmd(a),
		dlqResolveCmd(a), dlqPurgeCmd(a), dlqExportCmd(a))
	return cmd
}

// deadLetterJSON is a dead letter as the CLI prints it: a task plus its
// dead-letter record, every key present.
type deadLetterJSON struct {
	taskJSON
	Reason      bt.DeadReason `json:"reason"`
	FirstSeen   *time.Time    `json:"first_seen"`
	LastSeen    *time.Time    `json:"last_seen"`
	DeadCount   int           `json:"dead_count"`
	ReplayCount int           `json:"replay_count"`
	DLQStatus   bt.DLQStatus  `json:"dlq_status"`
}

func newDeadLetterJSON(t *bt.Task, withExecutions bool) deadLetterJSON {
	return deadLetterJSON{
		taskJSON: newTaskJSON(t, withExecutions),
		Reason:   t.DeadReason, FirstSeen: t.FirstSeen, LastSeen: t.LastSeen,
		DeadCount: t.DeadCount, ReplayCount: t.ReplayCount, DLQStatus: t.DLQStatus,
	}
}

func dlqListCmd(a *app) *cobra.Command {
	var (
		f  listFlags
		df dlqFilterFlags
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, ordered by id (oldest first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.params()
			if err != nil {
				return err
			}
			if err := df.apply(&p, true); err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			tasks, err := c.DeadLetters(cmd.Context(), p)
			if err != nil {
				return err
			}
			a.morePages(tasks, p.Limit)
			views := make([]deadLetterJSON, len(tasks))
			for i, t := range tasks {
				views[i] = newDeadLetterJSON(t, false)
			}
			return a.print(views, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tREASON\tSTATUS\tDEAD_COUNT\tATTEMPTS\tLAST_SEEN\tLAST_ERROR")
				for _, t := range tasks {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", t.ID, t.Queue, t.Kind, t.DeadReason, t.DLQStatus,
						t.DeadCount, t.Attempt, fmtTimePtr(t.LastSeen), oneLine(t.LastError, 60))
				}
				return tw.Flush()
			})
		},
	}
	f.register(cmd)
	f.registerPayload(cmd)
	df.register(cmd, true)
	addRawFlag(a, cmd)
	return cmd
}

func dlqShowCmd(a *app) *cobra.Command {
	var win backstop.ExecutionWindow
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a dead letter with its full attempt history",
		Long: "Show a dead letter with its attempt history (the newest --executions, as tasks show). An id that\n" +
			"is not a dead letter exits 3.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := checkExecutionWindow(win); err != nil {
				return err
			}
			t, page, events, err := c.Show(cmd.Context(), args[0], win)
			if err != nil {
				return err
			}
			if t.State != backstop.StateDead {
				return &exitError{code: ExitNotFound,
					err: fmt.Errorf("task %q is %s, not a dead letter (see: backstop tasks show %s)", t.ID, t.State, t.ID)}
			}
			v := newDeadLetterJSON(t, true)
			v.setPage(page)
			v.Events = &events
			return a.print(v, func(w io.Writer) error {
				if err := printTaskDetail(w, t, page, true); err != nil {
					return err
				}
				return printEvents(w, events)
			})
		},
	}
	addRawFlag(a, cmd)
	addExecutionWindowFlags(cmd, &win)
	return cmd
}

func joinReasons() string {
	reasons := make([]string, len(bt.DeadReasons))
	for i, r := range bt.DeadReasons {
		reasons[i] = string(r)
	}
	return strings.Join(reasons, ", ")
}
