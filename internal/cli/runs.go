package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/taskjson"
)

func init() { register(runsCmd) }

func runsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Runs: workflow runs, and the tasks sharing a run_id attribute",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("runs: name a subcommand: list, show, cancel, resume or complete-step")
		},
	}
	cmd.AddCommand(runsListCmd(a), runsShowCmd(a), runsCancelCmd(a), runsResumeCmd(a), runsCompleteStepCmd(a)) // list and cancel: workflows.go
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

func runsCompleteStepCmd(a *app) *cobra.Command {
	var (
		reason, result string
		item           int
	)
	cmd := &cobra.Command{
		Use:   "complete-step RUN_ID STEP --reason TEXT [--item N] [--result JSON]",
		Short: "Force a dead or stuck step of a workflow run to succeeded (admin); the run goes on",
		Long: `complete-step settles step STEP of run RUN_ID (item N of a fan-out step)
as succeeded with --result (JSON, default null), and the run goes on
(docs/workflows.md, "Forcing a step"): a halted run runs again, a
compensation_failed run compensates again, the step's successors start. The
step may be dead (failed under halt, or a dead compensation) or stuck
(pending: its task is canceled, or asked to stop when it runs, and its later
result changes nothing). The step's dead letter, if open, is resolved.
Recorded as step.force_completed with the actor and --reason (required):
backstop audit list.

Bad input (no --reason, a --result that is not JSON) exits 2; an unknown run,
step or item exits 3; a finished run, or a step that succeeded, was skipped or
was canceled with its run exits 4; none writes anything. With --server it
needs an admin token.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageErr("runs complete-step: --reason is required: say why the step is forced")
			}
			if err := checkReasonFlag("reason", reason); err != nil {
				return err
			}
			if item < 0 {
				return usageErr("--item must not be negative")
			}
			var res json.RawMessage
			if cmd.Flags().Changed("result") {
				if !json.Valid([]byte(result)) {
					return usageErr("--result is not valid JSON: %s", taskjson.DescribeJSONError(json.Unmarshal([]byte(result), new(any))))
				}
				res = json.RawMessage(result)
			}
			r, err := a.completeStep(cmd.Context(), args[0], args[1], item, res, reason)
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "run %s: step %s completed by hand; run %s\n", r.RunID, args[1], r.State)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded with the actor in step.force_completed: backstop audit list)")
	cmd.Flags().StringVar(&result, "result", "", "the step's result, JSON (default null)")
	cmd.Flags().IntVar(&item, "item", 0, "the fan-out item (0 for a step without for_each)")
	return cmd
}

func (a *app) completeStep(ctx context.Context, runID, step string, item int, result json.RawMessage, reason string) (*backstop.WorkflowRun, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).CompleteStep(ctx, runID, step, item, result, reason)
		return r, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.CompleteStep(cliActor(ctx), backstop.CompleteStepParams{RunID: runID, Step: step, Item: item, Result: result, Reason: reason})
}
