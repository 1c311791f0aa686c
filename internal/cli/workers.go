package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/apiclient"
)

func init() { register(workersCmd) }

func workersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List and show registered workers (in-process and remote)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("workers: name a subcommand: list or show")
		},
	}
	cmd.AddCommand(workersListCmd(a), workersShowCmd(a))
	return cmd
}

// workers reads the registry from the database or, with --server, from
// the API.
func (a *app) workersList(ctx context.Context, p backstop.WorkerListParams) ([]backstop.WorkerInfo, error) {
	if a.server != "" {
		q := url.Values{"limit": {strconv.Itoa(p.Limit)}}
		for k, v := range map[string]string{"queue": p.Queue, "state": string(p.State), "after": p.AfterID} {
			if v != "" {
				q.Set(k, v)
			}
		}
		l, err := apiclient.New(a.server, a.token).Workers(ctx, q)
		if err != nil {
			return nil, remoteErr(err)
		}
		return l.Items, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.Workers(ctx, p)
}

// workerView is `workers show`'s JSON: the worker, one page of its
// executions (newest first) and the cursor of the next page.
type workerView struct {
	backstop.WorkerDetail
	ExecutionsNext *string `json:"executions_next"`
}

func (a *app) workerShow(ctx context.Context, id string, p backstop.WorkerExecutionParams) (*workerView, error) {
	if a.server != "" {
		cl := apiclient.New(a.server, a.token)
		d, err := cl.Worker(ctx, id)
		if err != nil {
			return nil, remoteErr(err)
		}
		q := url.Values{"limit": {strconv.Itoa(p.Limit)}}
		if p.Outcome != "" {
			q.Set("outcome", string(p.Outcome))
		}
		if p.After != "" {
			q.Set("after", p.After)
		}
		l, err := cl.WorkerExecutions(ctx, id, q)
		if err != nil {
			return nil, remoteErr(err)
		}
		d.Executions = l.Items
		return &workerView{WorkerDetail: *d, ExecutionsNext: l.NextCursor}, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	d, err := c.Worker(ctx, id)
	if err != nil {
		return nil, err
	}
	page, err := c.WorkerExecutions(ctx, id, p)
	if err != nil {
		return nil, err
	}
	d.Executions = page.Items
	v := &workerView{WorkerDetail: *d}
	if page.Next != "" {
		v.ExecutionsNext = &page.Next
	}
	return v, nil
}

func workersListCmd(a *app) *cobra.Command {
	var (
		p     backstop.WorkerListParams
		state string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List registered workers, ordered by id",
		Long: "List the workers that registered: in-process workers when they start, remote workers\n" +
			"(backstop work --server) on their first claim. STATE is active, stopping, stopped, or stale\n" +
			"(not seen for workers.stale_after, 1m by default: its leases expire and its tasks are retried).\n" +
			"RUNNING counts the executions it runs now (their ids: workers show, -o json: current_execution_ids).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Limit < 1 || p.Limit > 10000 {
				return usageErr("--limit %d: must be between 1 and 10000", p.Limit)
			}
			p.State = backstop.WorkerState(state)
			ws, err := a.workersList(cmd.Context(), p)
			if err != nil {
				return err
			}
			if a.output == "table" && len(ws) == p.Limit {
				fmt.Fprintf(a.stderr, "(more may follow: --after %s)\n", ws[len(ws)-1].ID)
			}
			return a.print(ws, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tSTATE\tHOST\tPID\tQUEUES\tREMOTE\tRUNNING\tSTARTED\tLAST_SEEN")
				for _, x := range ws {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%t\t%d\t%s\t%s\n", x.ID, x.State, x.Host, x.PID, strings.Join(x.Queues, ","),
						x.Remote, len(x.CurrentExecutionIDs), fmtTime(x.StartedAt), fmtTime(x.LastSeen))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&p.Queue, "queue", "", "only workers of this queue")
	cmd.Flags().StringVar(&state, "state", "", "only workers in this state: active, stopping, stopped, stale")
	cmd.Flags().IntVar(&p.Limit, "limit", 100, "at most this many (1-10000)")
	cmd.Flags().StringVar(&p.AfterID, "after", "", "cursor: only ids after this one")
	return cmd
}

func workersShowCmd(a *app) *cobra.Command {
	var (
		p       backstop.WorkerExecutionParams
		outcome string
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a worker, what it runs now and its executions (newest first)",
		Long: `Show a worker: its registry entry, the executions it runs now (running) and a page of its
executions, newest first: the newest --executions (default 20, at most 1000), only those that
ended --outcome when given. When older ones are left out the table says which
--executions-after value shows them (-o json: executions_next).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if p.Limit < 1 || p.Limit > backstop.MaxExecutionsLimit {
				return usageErr("--executions %d: want 1 to %d", p.Limit, backstop.MaxExecutionsLimit)
			}
			p.Outcome = backstop.Outcome(outcome)
			d, err := a.workerShow(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			return a.print(d, func(w io.Writer) error {
				tw := newTable(w)
				field := func(k, v string) {
					if v != "" {
						fmt.Fprintf(tw, "%s:\t%s\n", k, v)
					}
				}
				field("id", d.ID)
				field("state", string(d.State))
				field("host", d.Host)
				field("pid", strconv.Itoa(d.PID))
				field("queues", strings.Join(d.Queues, ","))
				field("version", d.Version)
				field("labels", fmtAttrs(d.Labels))
				field("remote", strconv.FormatBool(d.Remote))
				field("started_at", fmtTime(d.StartedAt))
				field("last_seen", fmtTime(d.LastSeen))
				field("stopped_at", fmtTimePtr(d.StoppedAt))
				field("running", strings.Join(d.CurrentExecutionIDs, ","))
				if err := tw.Flush(); err != nil {
					return err
				}
				what := "executions"
				if p.Outcome != "" {
					what += " (" + string(p.Outcome) + ")"
				}
				fmt.Fprintf(w, "\n%s, newest first (%d):\n", what, len(d.Executions))
				tw = newTable(w)
				fmt.Fprintln(tw, "  TASK\tATTEMPT\tEXECUTION_ID\tSTARTED\tDURATION\tOUTCOME\tERROR")
				for _, e := range d.Executions {
					fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.TaskID, e.Attempt, e.ExecutionID, fmtTime(e.StartedAt),
						fmtDuration(e), outcomeOrRunning(e), oneLine(e.Error, 80))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if d.ExecutionsNext != nil {
					fmt.Fprintf(w, "(older executions: --executions-after %s)\n", *d.ExecutionsNext)
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&p.Limit, "executions", 20, fmt.Sprintf("how many executions to show: the newest (1-%d)", backstop.MaxExecutionsLimit))
	cmd.Flags().StringVar(&outcome, "outcome", "", "only executions that ended so: succeeded, transient_error, permanent_error, timeout, canceled, lease_expired, snoozed, released")
	cmd.Flags().StringVar(&p.After, "executions-after", "", "show the executions older than this cursor (the one the table names)")
	return cmd
}
