package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/apiclient"
)

func init() { register(runsCmd) }

func runsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Runs: workflow runs, and the tasks sharing a run_id attribute",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("runs: name a subcommand: list, show, cancel or resume")
		},
	}
	cmd.AddCommand(runsListCmd(a), runsShowCmd(a), runsCancelCmd(a), runsResumeCmd(a)) // list and cancel: workflows.go
	return cmd
}

func runsShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show RUN_ID",
		Short: "Summarise a run: its state and steps (a workflow run), tasks by state, progress, dead letters",
		Long: `show summarises the tasks whose attribute run_id is RUN_ID and, for a
workflow run, its state and every step (with -o json: state, steps[].id,
state, task_id, attempts, result). List the tasks with:
backstop tasks list --attr run_id=RUN_ID. An unknown run exits 3.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.run(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintf(tw, "run\t%s\n", r.RunID)
				if r.Workflow != "" {
					fmt.Fprintf(tw, "workflow\t%s version %d (plan %s)\n", r.Workflow, r.Version, shortHash(r.PlanHash))
					fmt.Fprintf(tw, "state\t%s\n", r.State)
					if r.Error != "" {
						fmt.Fprintf(tw, "error\t%s\n", r.Error)
					}
				}
				fmt.Fprintf(tw, "tasks\t%d\n", r.Total)
				fmt.Fprintf(tw, "steps done\t%d/%d (%d dead, %d canceled)\n", r.Counts[bt.StateSucceeded], r.Total,
					r.Counts[bt.StateDead], r.Counts[bt.StateCanceled])
				for _, st := range bt.States {
					if n := r.Counts[st]; n > 0 {
						fmt.Fprintf(tw, "  %s\t%d\n", st, n)
					}
				}
				pct := ""
				if r.Progress.Total > 0 {
					pct = fmt.Sprintf(" (%.0f%%)", 100*float64(r.Progress.Completed)/float64(r.Progress.Total))
				}
				fmt.Fprintf(tw, "progress\t%d/%d steps%s\n", r.Progress.Completed, r.Progress.Total, pct)
				fmt.Fprintf(tw, "open dead letters\t%d\n", r.DeadLetters)
				fmt.Fprintf(tw, "first activity\t%s\n", fmtTime(r.FirstActivity))
				fmt.Fprintf(tw, "last activity\t%s\n", fmtTime(r.LastActivity))
				fmt.Fprintf(tw, "finished\t%t\n", r.Finished)
				if err := tw.Flush(); err != nil || len(r.Steps) == 0 {
					return err
				}
				fmt.Fprintln(w)
				tw = newTable(w)
				fmt.Fprintln(tw, "STEP\tSTATE\tATTEMPTS\tTASK\tERROR")
				for _, st := range r.Steps {
					task := st.TaskID
					if len(st.Items) > 0 {
						task = fmt.Sprintf("(%d items)", len(st.Items))
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", st.ID, st.State, st.Attempts, orDash(task), orDash(st.Error))
				}
				return tw.Flush()
			})
		},
	}
}

// run summarises a run on the database or, with --server, through the API.
func (a *app) run(ctx context.Context, id string) (*backstop.Run, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).Run(ctx, id)
		return r, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.Run(ctx, id)
}

// runsResumeCmd is 'dlq redrive' selecting a run (RUN_ID) or a workflow's
// halted runs: the same command, flags and checks, under the runs noun.
func runsResumeCmd(a *app) *cobra.Command {
	rd := dlqRedriveCmd(a)
	cmd := &cobra.Command{
		Use:   "resume [RUN_ID] [--workflow W] [--step S]",
		Short: "Resume halted workflow runs: replay their dead steps (dlq redrive --run/--workflow/--step)",
		Long: `resume replays the dead steps of a halted run (RUN_ID), or of every run of
--workflow W halted at --step S, and each run goes on (docs/workflows.md). It
is 'dlq redrive --run RUN_ID' (or '--workflow W --step S'): the same flags
(--dry-run, --yes, --why, --patch, --rate, ...), checks and output. It needs
RUN_ID or --workflow (exit 2 without). 'runs list --workflow W --state
failed' lists the halted runs.

An unknown run (no workflow run and no task with that run_id) exits 3; a
workflow run that finished (succeeded, partial, compensated, canceled) has
nothing to resume and exits 4 naming its state; neither writes anything. A
resume that matches no dead step says "nothing matched" (exit 0) and its
redrive record is "empty", not "done".`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			if len(args) == 1 {
				if fl.Changed("run") {
					return usageErr("runs resume: give the run as RUN_ID or --run, not both")
				}
				if err := fl.Set("run", args[0]); err != nil {
					return err
				}
			}
			if v, _ := fl.GetString("run"); v == "" {
				if w, _ := fl.GetString("workflow"); w == "" {
					return usageErr("runs resume: name a run (RUN_ID) or a workflow (--workflow W [--step S])")
				}
			}
			return rd.RunE(cmd, nil)
		},
	}
	cmd.Flags().AddFlagSet(rd.Flags())
	return cmd
}
