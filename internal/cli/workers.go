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

func (a *app) workerShow(ctx context.Context, id string) (*backstop.WorkerDetail, error) {
	if a.server != "" {
		d, err := apiclient.New(a.server, a.token).Worker(ctx, id)
		return d, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.Worker(ctx, id)
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
			"(not seen for the stale TTL, 1m by default: its leases expire and its tasks are retried).",
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
				fmt.Fprintln(tw, "ID\tSTATE\tHOST\tPID\tQUEUES\tREMOTE\tSTARTED\tLAST_SEEN")
				for _, x := range ws {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%t\t%s\t%s\n", x.ID, x.State, x.Host, x.PID, strings.Join(x.Queues, ","),
						x.Remote, fmtTime(x.StartedAt), fmtTime(x.LastSeen))
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
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a worker with its most recent executions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.workerShow(cmd.Context(), args[0])
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
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(w, "\nrecent executions (%d):\n", len(d.Executions))
				tw = newTable(w)
				fmt.Fprintln(tw, "  TASK\tATTEMPT\tEXECUTION_ID\tSTARTED\tDURATION\tOUTCOME\tERROR")
				for _, e := range d.Executions {
					fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.TaskID, e.Attempt, e.ExecutionID, fmtTime(e.StartedAt),
						fmtDuration(e), outcomeOrRunning(e), oneLine(e.Error, 80))
				}
				return tw.Flush()
			})
		},
	}
}
