package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// This file holds the actions on live tasks, by ID or by a selection:
// `tasks cancel|run-now|delete|reprioritize`. Each runs as a bulk job
// (the library's TaskJob, on the redrive machinery: `backstop redrives
// show|items|cancel|resume` read and drive it), after a count that is the
// dry run's answer and the confirmation's question.

// taskActionFlags select the tasks of an action without IDs: the
// selection flags of `tasks list`.
type taskActionFlags struct {
	queue, kind, state, since, until, where, reason string
	attrs                                           []string
	all, dryRun, yes                                bool
	confirmOver, sample, priority                   int
}

// taskSelectionFlags are the flags that select tasks; taskBulkOnlyFlags
// mean something only without IDs.
var (
	taskSelectionFlags = []string{"queue", "kind", "attr", "state", "since", "until", "where"}
	taskBulkOnlyFlags  = []string{"all", "dry-run", "confirm-over", "sample"}
)

func (f *taskActionFlags) register(cmd *cobra.Command, action string) {
	cmd.Flags().StringVar(&f.queue, "queue", "", "without IDs: only tasks of this queue")
	cmd.Flags().StringVar(&f.kind, "kind", "", "without IDs: only tasks of this kind")
	cmd.Flags().StringArrayVar(&f.attrs, "attr", nil, "without IDs: only tasks with this attribute, key=value (repeatable; all must match)")
	cmd.Flags().StringVar(&f.state, "state", "", "without IDs: only tasks in this state, or states (comma-separated): "+
		joinActionStates(action)+" (the default: all of them)")
	cmd.Flags().StringVar(&f.since, "since", "", "without IDs: only tasks created at or after this time (RFC 3339) or this long ago (24h, 7d)")
	cmd.Flags().StringVar(&f.until, "until", "", "without IDs: only tasks created at or before this time (RFC 3339) or this long ago")
	registerWhere(cmd, &f.where, "tasks (without IDs)")
	cmd.Flags().BoolVar(&f.all, "all", false, "without IDs and without a selection: every task in "+joinActionStates(action))
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "count and show a sample of the matching tasks; change nothing")
	cmd.Flags().IntVar(&f.sample, "sample", backstop.DefaultRedriveSample, "with --dry-run: show this many of the matching tasks (0 to 100)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation, however many match")
	cmd.Flags().IntVar(&f.confirmOver, "confirm-over", 100, "ask for confirmation (or need --yes) when more than this many match")
	addReasonFlag(cmd, "reason", &f.reason)
	if action == backstop.TaskReprioritize {
		cmd.Flags().IntVar(&f.priority, "priority", 0, "the new priority (-32768 to 32767; higher runs first); required")
	}
}

func joinActionStates(action string) string {
	ss := backstop.ActionStates(action)
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// params reads the command line into the job's parameters; bad input is
// a usage error (exit 2) before anything is opened.
func (f *taskActionFlags) params(cmd *cobra.Command, name, action string, ids []string) (backstop.TaskJobParams, error) {
	p := backstop.TaskJobParams{Action: action, IDs: ids, Reason: f.reason, All: f.all, DryRun: f.dryRun}
	sel := changed(cmd, taskSelectionFlags)
	switch {
	case len(ids) > 0 && len(sel) > 0:
		return p, usageErr("%s: give IDs or a selection of tasks, not both (%s select by filter)", name, strings.Join(sel, ", "))
	case len(ids) > 0 && f.all:
		return p, usageErr("%s: give IDs or --all, not both", name)
	case len(ids) == 0 && f.all && len(sel) > 0:
		return p, usageErr("%s: --all selects every task in %s; it cannot be narrowed by %s (drop --all)", name,
			joinActionStates(action), strings.Join(sel, ", "))
	case len(ids) == 0 && !f.all && len(sel) == 0:
		return p, usageErr("%s: give an ID, or select tasks with %s; --all, alone, selects every task in %s",
			name, strings.Join(prefixed(taskSelectionFlags), ", "), joinActionStates(action))
	case f.confirmOver < 0:
		return p, usageErr("--confirm-over %d: must not be negative", f.confirmOver)
	case f.sample < 0 || f.sample > 100:
		return p, usageErr("--sample %d: must be between 0 and 100", f.sample)
	case len(ids) > backstop.MaxTaskJobIDs:
		return p, usageErr("%s: %d IDs: at most %d (select by a filter instead)", name, len(ids), backstop.MaxTaskJobIDs)
	}
	if err := checkReasonFlag("reason", f.reason); err != nil {
		return p, err
	}
	if action == backstop.TaskDelete && strings.TrimSpace(f.reason) == "" && !f.dryRun {
		return p, usageErr("%s: --reason is required: say why the tasks are deleted", name)
	}
	if action == backstop.TaskReprioritize {
		if !cmd.Flags().Changed("priority") {
			return p, usageErr("%s: --priority is required", name)
		}
		if f.priority < -32768 || f.priority > 32767 {
			return p, usageErr("--priority %d: must be between -32768 and 32767", f.priority)
		}
		prio := f.priority
		p.Priority = &prio
	}
	attrs, err := parseAttrs(f.attrs)
	if err != nil {
		return p, err
	}
	lp := backstop.ListParams{Queue: f.queue, Kind: f.kind, Attrs: attrs, States: parseStates(f.state)}
	allowed := backstop.ActionStates(action)
	for _, s := range lp.States {
		if !slices.Contains(allowed, s) {
			return p, usageErr("--state %s: %s changes only %s tasks", s, name, joinActionStates(action))
		}
	}
	if lp.CreatedSince, err = parseWhen("since", f.since); err != nil {
		return p, err
	}
	if lp.CreatedUntil, err = parseWhen("until", f.until); err != nil {
		return p, err
	}
	if !lp.CreatedSince.IsZero() && !lp.CreatedUntil.IsZero() && lp.CreatedUntil.Before(lp.CreatedSince) {
		return p, usageErr("--until %s is before --since %s", f.until, f.since)
	}
	if lp.Where, err = checkWhereFlag(f.where); err != nil {
		return p, err
	}
	p.Filter = lp
	return p, nil
}

// taskActionCmd is `tasks run-now|delete|reprioritize` (and cancel's bulk
// form): verb is how the command says what it does ("run now"), done what
// became of the tasks ("made claimable").
func taskActionCmd(a *app, use, action, short, long string) *cobra.Command {
	var f taskActionFlags
	cmd := &cobra.Command{
		Use:   use + " [ID...]",
		Short: short,
		Long:  long + taskActionLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskAction(cmd, "tasks "+use, action, &f, args)
		},
	}
	f.register(cmd, action)
	return cmd
}

const taskActionLong = `

Give one or more IDs, or select tasks as ` + "`tasks list`" + ` does (--queue, --kind, --attr, --state,
--since, --until, --where); a selection of nothing needs --all (exit 2 otherwise). The action runs as
a durable bulk job on the server's or this process's side: only tasks created by the time it
started are taken, each batch is one transaction, and every task changed gets one event with the
actor and --reason. Each task is judged by its state when its batch runs: one that started running
is never changed behind its worker's back (a cancel asks its worker to stop; the others skip it,
and its outcome says so). --dry-run counts and shows a sample and changes nothing; more than
--confirm-over (100) asks first (--yes does not ask). An interrupted job resumes when the same
command runs again, or with ` + "`backstop redrives resume ID`" + `; ` + "`backstop redrives items ID`" + ` lists each
task's outcome.`

// taskJobSummaryJSON is the last line of an action's JSON output.
type taskJobSummaryJSON struct {
	backstop.RedriveProgress
	Changed int `json:"changed"`
	Skipped int `json:"skipped"`
}

func (a *app) taskAction(cmd *cobra.Command, name, action string, f *taskActionFlags, ids []string) error {
	p, err := f.params(cmd, name, action, ids)
	if err != nil {
		return err
	}
	c, err := a.backend(cmd.Context(), nil)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cliActor(cmd.Context())
	verb := strings.ReplaceAll(strings.TrimPrefix(action, "task."), "_", " ")
	if f.dryRun || !f.yes {
		dp := p
		dp.DryRun, dp.SampleSize = true, f.sample
		if !f.dryRun || f.sample == 0 {
			dp.SampleSize = -1
		}
		pre, err := c.TaskJob(ctx, dp, func(backstop.RedriveProgress) {})
		if err != nil {
			return err
		}
		if f.dryRun {
			return a.print(pre, func(w io.Writer) error { return printTaskDryRun(w, verb, pre) })
		}
		if err := a.confirmManyOf(name, verb, "changed", "tasks", pre.Preview.Matched, f.confirmOver); err != nil { // terminal.go
			return err
		}
	}
	report, end := a.jobProgress() // dlq_ops.go
	final, err := c.TaskJob(ctx, p, report)
	end()
	if err != nil {
		return err
	}
	if len(ids) == 1 && final.Failed == 1 {
		return a.skippedOne(cmd, c, action, ids[0])
	}
	sum := taskJobSummaryJSON{RedriveProgress: final, Changed: final.Replayed, Skipped: final.Failed}
	if a.output == "json" {
		return json.NewEncoder(a.stdout).Encode(sum)
	}
	if final.Empty {
		_, err = fmt.Fprintf(a.stdout, "%s: nothing matched; no task changed (job %s, recorded as empty)\n", name, final.RedriveID)
		return err
	}
	skipped := ""
	if final.Failed > 0 {
		skipped = fmt.Sprintf(", %d skipped (`backstop redrives items %s --failed` says why)", final.Failed, final.RedriveID)
	}
	_, err = fmt.Fprintf(a.stdout, "%s: %d tasks%s (job %s)\n", verb, final.Replayed, skipped, final.RedriveID)
	return err
}

// skippedOne is the error of an action on one ID that did not change it:
// an unknown id exits 3, a task in a state the action does not change 4.
func (a *app) skippedOne(cmd *cobra.Command, c backend, action, id string) error {
	t, _, _, err := c.Show(cmd.Context(), id, backstop.ExecutionWindow{Limit: 1})
	if err != nil {
		return err
	}
	why := fmt.Sprintf("changes only %s tasks", joinActionStates(action))
	if t.State == bt.StateRunning {
		why = "does not change a running task behind its worker's back (cancel it instead)"
	}
	return fmt.Errorf("%w: task %s is %s: %s %s", backstop.ErrConflict, id, t.State, action, why)
}

func printTaskDryRun(w io.Writer, verb string, pre backstop.RedriveProgress) error {
	var rows [][]string
	matched := 0
	if pre.Preview != nil {
		matched = pre.Preview.Matched
		for _, s := range pre.Preview.Sample {
			rows = append(rows, []string{s.ID, s.Queue, s.Kind, string(s.State)})
		}
	}
	return printSample(w, fmt.Sprintf("would %s %d tasks", verb, matched), []string{"ID", "QUEUE", "KIND", "STATE"}, rows) // dlq_bulk.go
}

// TaskJob is POST /v1/tasks/bulk, followed until the job ends.
func (r *remoteBackend) TaskJob(ctx context.Context, p backstop.TaskJobParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
	f := p.Filter
	req := api.TaskJobRequest{Action: p.Action, IDs: p.IDs, States: f.States, Queue: f.Queue, Kind: f.Kind, Attributes: f.Attrs,
		Where: f.Where, All: p.All, Priority: p.Priority, Reason: p.Reason, Rate: p.Rate, Limit: p.Limit,
		Wait: bt.Duration(5 * time.Second), DryRun: p.DryRun, Sample: max(p.SampleSize, 0)}
	if !f.CreatedSince.IsZero() {
		req.Since = &f.CreatedSince
	}
	if !f.CreatedUntil.IsZero() {
		req.Until = &f.CreatedUntil
	}
	st, err := r.cl.TaskJob(ctx, req)
	return r.awaitJob(ctx, st, err, p.DryRun, progress)
}
