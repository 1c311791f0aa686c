package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

func init() { register(tasksCmd) }

func tasksCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List, show, cancel, run now, delete and reprioritize tasks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("tasks: name a subcommand: list, show, cancel, run-now, delete, reprioritize or logs")
		},
	}
	cmd.AddCommand(tasksListCmd(a), tasksShowCmd(a), tasksCancelCmd(a), tasksRunNowCmd(a), tasksDeleteCmd(a),
		tasksReprioritizeCmd(a), tasksLogsCmd(a))
	return cmd
}

// listFlags are the filters shared by `tasks list` and `dlq list`.
type listFlags struct {
	queue, kind, after string
	where              string // tasks list only: dlq list has dlqFilterFlags's
	since, until       string // tasks list only (creation time): dlq list has dlqFilterFlags's (last seen)
	attrs              []string
	limit              int
	withPayload        bool
}

func (f *listFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.queue, "queue", "", "only tasks of this queue")
	cmd.Flags().StringVar(&f.kind, "kind", "", "only tasks of this kind")
	cmd.Flags().StringArrayVar(&f.attrs, "attr", nil, "only tasks with this attribute, key=value (repeatable; all must match)")
	cmd.Flags().IntVar(&f.limit, "limit", 100, "at most this many tasks (1-10000)")
	cmd.Flags().StringVar(&f.after, "after", "", "cursor: only ids after this one (the last id of the previous page)")
}

// registerPayload adds --with-payload to a listing (`tasks list`, `dlq
// list`): without it the listing is of summaries, as the API's lists.
func (f *listFlags) registerPayload(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.withPayload, "with-payload", false,
		"list each task's payload too (default: a summary, payload_size without the payload)")
}

func (f *listFlags) params() (backstop.ListParams, error) {
	attrs, err := parseAttrs(f.attrs)
	if err != nil {
		return backstop.ListParams{}, err
	}
	if f.limit < 1 || f.limit > 10000 {
		return backstop.ListParams{}, usageErr("--limit %d: must be between 1 and 10000", f.limit)
	}
	return backstop.ListParams{Queue: f.queue, Kind: f.kind, Attrs: attrs, AfterID: f.after, Limit: f.limit,
		WithoutPayload: !f.withPayload}, nil
}

func tasksListCmd(a *app) *cobra.Command {
	var (
		f     listFlags
		state string
		view  string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, ordered by id (oldest first), or one operator view (--view)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if view != "" {
				return a.listView(cmd, view, f.limit)
			}
			p, err := f.params()
			if err != nil {
				return err
			}
			p.States = parseStates(state)
			if p.CreatedSince, err = parseWhen("since", f.since); err != nil {
				return err
			}
			if p.CreatedUntil, err = parseWhen("until", f.until); err != nil {
				return err
			}
			if !p.CreatedSince.IsZero() && !p.CreatedUntil.IsZero() && p.CreatedUntil.Before(p.CreatedSince) {
				return usageErr("--until %s is before --since %s", f.until, f.since)
			}
			if p.Where, err = checkWhereFlag(f.where); err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			tasks, err := c.List(cmd.Context(), p)
			if err != nil {
				return err
			}
			a.morePages(tasks, p.Limit)
			views := make([]taskJSON, len(tasks))
			for i, t := range tasks {
				views[i] = newTaskJSON(t, false)
			}
			return a.print(views, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPT\tRUN_AT\tLAST_ERROR")
				for _, t := range tasks {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.ID, t.Queue, t.Kind, t.State,
						t.Attempt, t.MaxAttempts, fmtTime(t.RunAt), oneLine(t.LastError, 60))
				}
				return tw.Flush()
			})
		},
	}
	f.register(cmd)
	f.registerPayload(cmd)
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state, or states (comma-separated): "+joinStates())
	cmd.Flags().StringVar(&view, "view", "", "an operator view instead of filters: "+joinViews())
	cmd.Flags().StringVar(&f.since, "since", "", "only tasks created at or after this time (RFC 3339) or this long ago (24h, 7d)")
	cmd.Flags().StringVar(&f.until, "until", "", "only tasks created at or before this time (RFC 3339) or this long ago")
	registerWhere(cmd, &f.where, "tasks")
	addRawFlag(a, cmd)
	return cmd
}

// morePages tells a table reader how to fetch the next page; JSON readers
// use the last id themselves.
func (a *app) morePages(tasks []*backstop.Task, limit int) {
	if a.output == "table" && len(tasks) == limit && limit > 0 {
		fmt.Fprintf(a.stderr, "(more may follow: --after %s)\n", tasks[len(tasks)-1].ID)
	}
}

func tasksShowCmd(a *app) *cobra.Command {
	var win backstop.ExecutionWindow
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a task with its executions (attempts) and its timeline (events)",
		Long: `Show a task with its executions (attempts) and its timeline (events). The executions come a
window at a time: the newest --executions (default 100, at most 1000), oldest first; when older
ones are left out, the header says how many there are and the --executions-before value that
shows them (-o json: executions_total and executions_next).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkExecutionWindow(win); err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			t, page, events, err := c.Show(cmd.Context(), args[0], win)
			if err != nil {
				return err
			}
			v := newTaskJSON(t, true)
			v.setPage(page)
			v.Events = &events
			return a.print(v, func(w io.Writer) error {
				if err := printTaskDetail(w, t, page, false); err != nil {
					return err
				}
				return printTimeline(w, t, events)
			})
		},
	}
	addRawFlag(a, cmd)
	addExecutionWindowFlags(cmd, &win)
	return cmd
}

// addExecutionWindowFlags adds --executions and --executions-before, the
// window of executions a show command prints.
func addExecutionWindowFlags(cmd *cobra.Command, win *backstop.ExecutionWindow) {
	cmd.Flags().IntVar(&win.Limit, "executions", backstop.DefaultExecutionsLimit,
		fmt.Sprintf("how many executions to show: the newest (1-%d)", backstop.MaxExecutionsLimit))
	cmd.Flags().StringVar(&win.Before, "executions-before", "", "show the executions older than this one (the id the header names)")
}

func checkExecutionWindow(win backstop.ExecutionWindow) error {
	if win.Limit < 1 || win.Limit > backstop.MaxExecutionsLimit {
		return usageErr("--executions %d: want 1 to %d", win.Limit, backstop.MaxExecutionsLimit)
	}
	return nil
}

func tasksCancelCmd(a *app) *cobra.Command {
	var f taskActionFlags
	cmd := &cobra.Command{
		Use:   "cancel [ID...]",
		Short: "Cancel tasks: at once when waiting, within a heartbeat when running",
		Long: "Cancel a task. A scheduled or pending task is canceled at once; a running one is asked to stop\n" +
			"and its handler's context ends within one heartbeat interval. A finished task cannot be\n" +
			"canceled (exit 4); an unknown id exits 3. --reason is recorded with the actor in the history." + taskActionLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || len(changed(cmd, append(taskSelectionFlags, taskBulkOnlyFlags...))) > 0 {
				return a.taskAction(cmd, "tasks cancel", backstop.TaskCancel, &f, args) // tasks_bulk.go
			}
			reason := f.reason
			if err := checkReasonFlag("reason", reason); err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			t, err := c.Cancel(cliActor(cmd.Context()), backstop.CancelParams{ID: args[0], Reason: reason})
			if err != nil {
				return err
			}
			return a.print(newTaskJSON(t, false), func(w io.Writer) error {
				status := string(t.State)
				if t.State == bt.StateRunning {
					status = "cancel requested (the running attempt stops within a heartbeat)"
				}
				_, err := fmt.Fprintf(w, "%s\t%s\n", t.ID, status)
				return err
			})
		},
	}
	f.register(cmd, backstop.TaskCancel)
	return cmd
}

func tasksRunNowCmd(a *app) *cobra.Command {
	return taskActionCmd(a, "run-now", backstop.TaskRunNow, "Make scheduled (retrying included) and pending tasks claimable now",
		"Make tasks claimable now: a scheduled task (waiting for its run_at or a retry's backoff) becomes\n"+
			"pending with run_at now; a pending one keeps its place with run_at now.")
}

func tasksDeleteCmd(a *app) *cobra.Command {
	return taskActionCmd(a, "delete", backstop.TaskDelete, "Delete scheduled and pending tasks, with a reason",
		"Delete tasks that have not run yet (scheduled or pending), with their payloads and attempts; their\n"+
			"history stays, task.deleted last with the actor and --reason (required). Workflow steps and\n"+
			"ordered tasks are skipped: cancel them instead.")
}

func tasksReprioritizeCmd(a *app) *cobra.Command {
	return taskActionCmd(a, "reprioritize", backstop.TaskReprioritize, "Change the priority of waiting tasks",
		"Set the priority (--priority, required; higher runs first) of waiting tasks (scheduled, pending,\n"+
			"buffered).")
}

// taskJSON is a task as the CLI prints it: the contract's snake_case keys,
// with attributes always an object and, when shown, executions always an
// array.
type taskJSON struct {
	*bt.Task
	// Payload is the task's; a listing's summary (no payload: its size is
	// payload_size) leaves the key out.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Executions is set by show commands and left out of listings.
	Executions *[]bt.Execution `json:"executions,omitempty"`
	// Events (the task's history) is set by show commands.
	Events *[]bt.Event `json:"events,omitempty"`
	// ExecutionsTotal and ExecutionsNext are set by show commands: all the
	// task's executions, and the --executions-before value of the older
	// ones the window left out (absent when none are).
	ExecutionsTotal *int   `json:"executions_total,omitempty"`
	ExecutionsNext  string `json:"executions_next,omitempty"`
}

func (v *taskJSON) setPage(p backstop.ExecutionsPage) {
	v.ExecutionsTotal, v.ExecutionsNext = &p.Total, p.Next
}

func newTaskJSON(t *bt.Task, withExecutions bool) taskJSON {
	if t.Attributes == nil {
		cp := *t
		cp.Attributes = map[string]string{}
		t = &cp
	}
	v := taskJSON{Task: t, Payload: t.Payload}
	if withExecutions {
		ex := t.Executions
		if ex == nil {
			ex = []bt.Execution{}
		}
		v.Executions = &ex
	}
	return v
}

// printTaskDetail prints a task's fields, then its window of executions
// (page: what the window left out). With details, each execution's error
// detail (stack, output tail) follows.
func printTaskDetail(w io.Writer, t *bt.Task, page backstop.ExecutionsPage, details bool) error {
	tw := newTable(w)
	field := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", name, value)
		}
	}
	field("id", t.ID)
	field("queue", t.Queue)
	field("kind", t.Kind)
	field("state", string(t.State))
	field("attempt", fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts))
	field("priority", strconv.Itoa(t.Priority))
	field("run_at", fmtTime(t.RunAt))
	field("created_at", fmtTime(t.CreatedAt))
	field("updated_at", fmtTime(t.UpdatedAt))
	if t.Timeout > 0 {
		field("timeout", t.Timeout.String())
	}
	field("deadline", fmtTimePtr(t.Deadline))
	field("retry", fmtRetry(t.Retry))
	field("attributes", fmtAttrs(t.Attributes))
	field("idempotency_key", t.IdempotencyKey)
	if t.UniqueUntil != nil {
		field("unique_until", fmtTime(*t.UniqueUntil))
	}
	if t.MergeKey != "" {
		field("merge_key", fmt.Sprintf("%s (merged %d times)", t.MergeKey, t.MergeCount))
	}
	if d := t.Debounce; d != nil {
		latest := "no max wait"
		if d.MaxWaitUntil != nil {
			latest = "at the latest " + fmtTime(*d.MaxWaitUntil)
		}
		field("debounce", fmt.Sprintf("key %s, runs once quiet for %s, %s", d.Key, d.For, latest))
	}
	field("progress", fmtProgress(t.Progress))
	if t.Complexity != 0 {
		field("complexity", strconv.FormatFloat(t.Complexity, 'g', -1, 64))
	}
	payload := oneLine(string(t.Payload), 1000)
	if t.PayloadSpilled {
		payload += fmt.Sprintf("  (%d bytes, spilled)", t.PayloadSize)
	}
	field("payload", payload)
	field("trace_parent", t.TraceParent)
	if t.State == bt.StateRunning {
		field("worker_id", t.WorkerID)
		field("execution_id", t.ExecutionID)
		field("lease_expires_at", fmtTimePtr(t.LeaseExpiresAt))
	}
	field("cancel_requested_at", fmtTimePtr(t.CancelRequestedAt))
	field("finalized_at", fmtTimePtr(t.FinalizedAt))
	if t.DeadCount > 0 || t.DeadReason != "" {
		field("reason", string(t.DeadReason))
		field("first_seen", fmtTimePtr(t.FirstSeen))
		field("last_seen", fmtTimePtr(t.LastSeen))
		field("dead_count", strconv.Itoa(t.DeadCount))
		field("replay_count", strconv.Itoa(t.ReplayCount))
		field("dlq_status", string(t.DLQStatus))
	}
	field("replayed_from", t.ReplayedFrom)
	if t.OrderingKey != "" {
		field("ordering_key", t.OrderingKey)
		field("sequence", strconv.FormatInt(t.Sequence, 10))
		if len(t.Gaps) > 0 {
			b, _ := json.Marshal(t.Gaps)
			field("gaps", string(b))
		}
		field("ordering_wait", t.OrderingWait)
	}
	field("waiting", t.Waiting) // a limit holds it back (docs/limits.md)
	field("last_error", oneLine(t.LastError, 200))
	if err := tw.Flush(); err != nil {
		return err
	}

	if page.Next != "" {
		fmt.Fprintf(w, "\nexecutions (the newest %d of %d; older: --executions-before %s):\n", len(t.Executions), page.Total, page.Next)
	} else {
		fmt.Fprintf(w, "\nexecutions (%d):\n", len(t.Executions))
	}
	if len(t.Executions) == 0 {
		_, err := fmt.Fprintln(w, "  none yet")
		return err
	}
	tw = newTable(w)
	fmt.Fprintln(tw, "  ATTEMPT\tEXECUTION_ID\tWORKER\tSTARTED\tDURATION\tOUTCOME\tERROR")
	for _, e := range t.Executions {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Attempt, e.ExecutionID, e.WorkerID,
			fmtTime(e.StartedAt), fmtDuration(e), outcomeOrRunning(e), oneLine(e.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if details {
		for _, e := range t.Executions {
			if e.ErrorDetail == "" {
				continue
			}
			fmt.Fprintf(w, "\nattempt %d (%s) detail:\n", e.Attempt, e.ExecutionID)
			for _, line := range strings.Split(strings.TrimRight(e.ErrorDetail, "\n"), "\n") {
				fmt.Fprintf(w, "  | %s\n", line)
			}
		}
	}
	return nil
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// fmtTime prints times in RFC 3339, UTC, to the second when that loses
// nothing and to the microsecond otherwise.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return fmtTime(*t)
}

func fmtDuration(e bt.Execution) string {
	if e.FinishedAt == nil {
		return "-"
	}
	d := e.FinishedAt.Sub(e.StartedAt)
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	}
	return d.String()
}

func outcomeOrRunning(e bt.Execution) string {
	if e.Outcome == "" && e.FinishedAt == nil {
		return "running"
	}
	return string(e.Outcome)
}

func fmtRetry(p *bt.RetryPolicy) string {
	if p == nil {
		return ""
	}
	if len(p.Schedule) > 0 {
		parts := make([]string, len(p.Schedule))
		for i, d := range p.Schedule {
			parts[i] = d.String()
		}
		return "schedule " + strings.Join(parts, ",") + " (last repeats)"
	}
	parts := []string{"exponential"}
	if p.Base > 0 {
		parts = append(parts, "base "+p.Base.String())
	}
	if p.Factor > 0 {
		parts = append(parts, "factor "+strconv.FormatFloat(p.Factor, 'g', -1, 64))
	}
	if p.Max > 0 {
		parts = append(parts, "max "+p.Max.String())
	}
	if p.Jitter != nil && !*p.Jitter {
		parts = append(parts, "no jitter")
	}
	return strings.Join(parts, " ")
}

func fmtAttrs(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

func fmtProgress(p bt.Progress) string {
	if p.Total == 0 && p.Completed == 0 {
		return ""
	}
	if p.Total == 0 {
		return fmt.Sprintf("%d steps done", p.Completed)
	}
	return fmt.Sprintf("%d of %d steps", p.Completed, p.Total)
}

// oneLine flattens s to one line of at most n runes, marking a cut with "…".
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func joinStates() string {
	parts := make([]string, len(bt.States))
	for i, s := range bt.States {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
