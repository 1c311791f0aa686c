package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

func init() { register(workflowsCmd) }

func workflowsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflows",
		Short: "Register workflow definitions and start runs (docs/workflows.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("workflows: name a subcommand: apply, list, show or run")
		},
	}
	cmd.AddCommand(workflowsApplyCmd(a), workflowsListCmd(a), workflowsShowCmd(a), workflowsRunCmd(a))
	return cmd
}

func workflowsApplyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "apply FILE",
		Short: "Validate a definition (YAML or JSON; - for stdin) and register it as the workflow's next version",
		Long: `apply validates FILE and registers it. A definition identical to the
latest version (same plan hash) registers nothing and prints that version.
A bad definition (a cycle, an unknown needs or compensation step, a duplicate
id, a bad expression...) exits 2 naming the step, and writes nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.readInput(args[0], "FILE")
			if err != nil {
				return err
			}
			def, err := workflow.Parse(b)
			if err != nil {
				return usageErr("%s: %v", args[0], err)
			}
			if err := def.Validate(); err != nil {
				return usageErr("%s: %v", args[0], err)
			}
			v, created, err := a.applyWorkflow(cmd.Context(), def)
			if err != nil {
				return err
			}
			return a.print(api.WorkflowView{WorkflowVersion: v, Created: created}, func(w io.Writer) error {
				verb := "registered"
				if !created {
					verb = "unchanged: already"
				}
				_, err := fmt.Fprintf(w, "%s %s version %d (plan %s)\n", verb, v.Name, v.Version, shortHash(v.PlanHash))
				return err
			})
		},
	}
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func (a *app) applyWorkflow(ctx context.Context, def *workflow.Definition) (backstop.WorkflowVersion, bool, error) {
	if a.server != "" {
		v, err := apiclient.New(a.server, a.token).ApplyWorkflow(ctx, def.Canonical())
		if err != nil {
			return backstop.WorkflowVersion{}, false, remoteErr(err)
		}
		return v.WorkflowVersion, v.Created, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return backstop.WorkflowVersion{}, false, err
	}
	defer s.Close()
	return c.ApplyWorkflow(cliActor(ctx), def)
}

func workflowsListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "The latest version of every registered workflow",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := a.workflows(cmd.Context())
			if err != nil {
				return err
			}
			if ws == nil {
				ws = []backstop.WorkflowVersion{}
			}
			return a.print(ws, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "WORKFLOW\tVERSION\tPLAN\tSTEPS\tREGISTERED")
				for _, v := range ws {
					steps := "?"
					if def, err := workflow.Parse(v.Definition); err == nil {
						steps = fmt.Sprint(len(def.Steps))
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", v.Name, v.Version, shortHash(v.PlanHash), steps, fmtTime(v.CreatedAt))
				}
				return tw.Flush()
			})
		},
	}
}

func (a *app) workflows(ctx context.Context) ([]backstop.WorkflowVersion, error) {
	if a.server != "" {
		ws, err := apiclient.New(a.server, a.token).Workflows(ctx)
		return ws, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.Workflows(ctx)
}

func workflowsShowCmd(a *app) *cobra.Command {
	var version int
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "A workflow's definition (the latest version, or --version N)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version < 0 {
				return usageErr("--version: must be 1 or more")
			}
			v, err := a.workflow(cmd.Context(), args[0], version)
			if err != nil {
				return err
			}
			return a.print(v, func(w io.Writer) error {
				fmt.Fprintf(w, "%s version %d (plan %s), registered %s\n", v.Name, v.Version, v.PlanHash, fmtTime(v.CreatedAt))
				def, err := workflow.Parse(v.Definition)
				if err != nil {
					return err
				}
				tw := newTable(w)
				fmt.Fprintln(tw, "STEP\tKIND\tNEEDS\tON FAILURE\tCOMPENSATE")
				for _, st := range def.Steps {
					role := st.OnFailure
					if st.Compensation {
						role = "(compensation)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st.ID, st.Kind, orDash(strings.Join(st.Needs, ",")), orDash(role), orDash(st.Compensate))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "the version to show (default: the latest)")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) workflow(ctx context.Context, name string, version int) (*backstop.WorkflowVersion, error) {
	if a.server != "" {
		v, err := apiclient.New(a.server, a.token).Workflow(ctx, name, version)
		if err != nil {
			return nil, remoteErr(err)
		}
		return &v.WorkflowVersion, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	v, _, err := c.Workflow(ctx, name, version)
	return v, err
}

func workflowsRunCmd(a *app) *cobra.Command {
	var (
		input, inputFile, runID, batchFile string
		version                            int
		traced                             bool
	)
	cmd := &cobra.Command{
		Use:   "run NAME | run [NAME] --batch-file FILE",
		Short: "Start a run of a workflow (or many from a file); prints the run id",
		Long: `run starts a run of NAME's latest version (or --version N) with --input
(JSON; default {}). It prints the run id; follow it with
backstop runs show RUN_ID, or backstop events tail --stream run.RUN_ID.
--run-id makes the start idempotent: a run with that id exists → exit 4.
--trace samples the run's trace (one trace: the run, its steps, their
attempts) whatever telemetry.sample_ratio says.

--batch-file starts every run of an NDJSON file (- for stdin), one run
object per line: {"workflow", "version", "input", "run_id", "trace"}
("workflow" defaults to NAME when given); blank lines are skipped. The
whole file is checked before any run is written (a bad line is named,
exit 2; a workflow or version not registered, exit 3; a run id twice,
exit 2); the runs are then started 1000 at a time, each thousand in one
transaction. It prints one run id per line, in the file's order.
  backstop workflows run --batch-file runs.ndjson`,
		Args: func(cmd *cobra.Command, args []string) error {
			if batchFile != "" {
				return cobra.MaximumNArgs(1)(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if batchFile != "" {
				for _, name := range []string{"input", "input-file", "run-id", "version", "trace"} {
					if cmd.Flags().Changed(name) {
						return usageErr("--%s cannot be combined with --batch-file: put it in each record", name)
					}
				}
				name := ""
				if len(args) == 1 {
					name = args[0]
				}
				return a.startRunBatch(cmd.Context(), batchFile, name)
			}
			if input != "" && inputFile != "" {
				return usageErr("give --input or --input-file, not both")
			}
			raw := json.RawMessage(input)
			if inputFile != "" {
				b, err := a.readInput(inputFile, "--input-file")
				if err != nil {
					return err
				}
				raw = b
			}
			if len(raw) > 0 && !json.Valid(raw) {
				return usageErr("--input: is not valid JSON")
			}
			if version < 0 {
				return usageErr("--version: must be 1 or more")
			}
			r, err := a.startRun(cmd.Context(), backstop.RunWorkflowParams{Workflow: args[0], Version: version, Input: raw, RunID: runID, Trace: traced})
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, r.RunID)
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&input, "input", "", "the run's input (JSON)")
	fl.StringVar(&inputFile, "input-file", "", "read the run's input from this file (- for stdin)")
	fl.StringVar(&runID, "run-id", "", "the run's id (default: a new UUIDv7)")
	fl.IntVar(&version, "version", 0, "the workflow version to run (default: the latest)")
	fl.BoolVar(&traced, "trace", false, "trace the run whatever the sampling ratio")
	fl.StringVar(&batchFile, "batch-file", "", "start the runs of this NDJSON file (- for stdin), one run object per line")
	return cmd
}

func (a *app) startRun(ctx context.Context, p backstop.RunWorkflowParams) (*backstop.RunStarted, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).RunWorkflow(ctx, p.Workflow, api.RunRequest{Input: p.Input, RunID: p.RunID, Version: p.Version, Trace: p.Trace})
		return r, remoteErr(err)
	}
	cfg, stop, err := a.traced(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	s, c, err := a.openDB(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.RunWorkflow(ctx, p)
}

func runsListCmd(a *app) *cobra.Command {
	var (
		wf, before string
		states     []string
		limit      int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Workflow runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := backstop.ListRunsParams{Workflow: wf, BeforeID: before, Limit: limit}
			for _, s := range states {
				for _, one := range strings.Split(s, ",") {
					if !workflow.ValidRunState(store.RunState(one)) {
						return usageErr("--state: unknown run state %q", one)
					}
					f.States = append(f.States, store.RunState(one))
				}
			}
			if limit < 1 || limit > 1000 {
				return usageErr("--limit: must be 1-1000")
			}
			runs, err := a.runs(cmd.Context(), f)
			if err != nil {
				return err
			}
			if runs == nil {
				runs = []store.RunRecord{}
			}
			return a.print(runs, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "RUN\tWORKFLOW\tVERSION\tSTATE\tSTARTED\tUPDATED")
				for _, r := range runs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.RunID, r.Workflow, r.Version, r.State, fmtTime(r.CreatedAt), fmtTime(r.UpdatedAt))
				}
				return tw.Flush()
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&wf, "workflow", "", "only this workflow's runs")
	fl.StringSliceVar(&states, "state", nil, "only runs in these states (running, failed, compensating, compensated, compensation_failed, succeeded, partial, canceling, canceled)")
	fl.StringVar(&before, "before", "", "cursor: runs older than this run id")
	fl.IntVar(&limit, "limit", 100, "at most this many runs (1-1000)")
	return cmd
}

func (a *app) runs(ctx context.Context, f backstop.ListRunsParams) ([]store.RunRecord, error) {
	if a.server != "" {
		p, err := apiclient.New(a.server, a.token).Runs(ctx, f)
		if err != nil {
			return nil, remoteErr(err)
		}
		return p.Runs, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.WorkflowRuns(ctx, f)
}

func runsCancelCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a workflow run: waiting steps now, running ones cooperatively (rollback on_fail: compensate first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := backstop.CheckReason("--reason", reason, false); err != nil {
				return err
			}
			r, err := a.cancelRun(backstop.WithReason(cmd.Context(), reason), args[0])
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "run %s: %s\n", r.RunID, r.State)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the actor in run.canceled: backstop audit list)")
	return cmd
}

func (a *app) cancelRun(ctx context.Context, id string) (*backstop.WorkflowRun, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).CancelRunWhy(ctx, id, store.ReasonFrom(ctx))
		return r, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.CancelRun(cliActor(ctx), id)
}
