package cli

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

func init() { register(queuesCmd) }

func queuesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List queues; pause and resume claiming from a queue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("queues: name a subcommand: list, pause, resume or fair")
		},
	}
	cmd.AddCommand(queuesListCmd(a), queuesPauseCmd(a, true), queuesPauseCmd(a, false), queuesFairCmd(a))
	return cmd
}

func queuesListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Every queue that holds tasks or is paused, with task counts by state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs, err := a.queues(cmd.Context())
			if err != nil {
				return err
			}
			if qs == nil {
				qs = []backstop.QueueSummary{}
			}
			return a.print(qs, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprint(tw, "QUEUE\tPAUSED")
				for _, st := range bt.States {
					fmt.Fprintf(tw, "\t%s", upper(string(st)))
				}
				fmt.Fprintln(tw, "\tTOTAL")
				for _, q := range qs {
					paused := "-"
					if q.Paused {
						paused = "since " + fmtTimePtr(q.PausedAt) + " by " + q.PausedBy
					}
					fmt.Fprintf(tw, "%s\t%s", q.Name, paused)
					// A capped state's count is a lower bound: "n+".
					plus := func(capped bool) string {
						if capped {
							return "+"
						}
						return ""
					}
					for _, st := range bt.States {
						fmt.Fprintf(tw, "\t%d%s", q.Counts[st], plus(slices.Contains(q.CountsCapped, st)))
					}
					fmt.Fprintf(tw, "\t%d%s\n", q.Total, plus(len(q.CountsCapped) > 0))
				}
				return tw.Flush()
			})
		},
	}
}

// queues counts tasks by queue and state, on the database or, with
// --server, through the API.
func (a *app) queues(ctx context.Context) ([]backstop.QueueSummary, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).Queues(ctx)
		if err != nil {
			return nil, remoteErr(err)
		}
		return r.Items, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.Queues(ctx)
}

// pauseQueue pauses or resumes a queue, on the database or through the
// API (where the token's name is the actor).
func (a *app) pauseQueue(ctx context.Context, name string, pause bool, actor string) (queuePauseJSON, error) {
	out := queuePauseJSON{Name: name, Paused: pause}
	if a.server != "" {
		cl := apiclient.New(a.server, a.token)
		var r *api.QueuePauseResponse
		var err error
		r, err = cl.SetQueuePaused(ctx, name, pause, store.ReasonFrom(ctx))
		if err != nil {
			return out, remoteErr(err)
		}
		out.Changed = r.Changed
		if pause && r.PausedAt != nil {
			out.Pause = &backstop.QueueState{Name: r.Name, PausedAt: *r.PausedAt, PausedBy: r.PausedBy}
		}
		return out, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return out, err
	}
	defer s.Close()
	if pause {
		st, changed, err := c.PauseQueue(ctx, name, actor)
		if err != nil {
			return out, err
		}
		out.Changed, out.Pause = changed, &st
		return out, nil
	}
	out.Changed, err = c.ResumeQueue(ctx, name, actor)
	return out, err
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// queuePauseJSON is what pause and resume print.
type queuePauseJSON struct {
	Name    string               `json:"name"`
	Paused  bool                 `json:"paused"`
	Changed bool                 `json:"changed"`
	Pause   *backstop.QueueState `json:"pause,omitempty"`
}

func queuesPauseCmd(a *app, pause bool) *cobra.Command {
	var actor, reason string
	use, short := "resume QUEUE", "Let workers claim from a paused queue again"
	if pause {
		use, short = "pause QUEUE", "Stop every worker (in-process or remote) from claiming the queue's tasks"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `. Pausing is recorded in the store and the
store's claim skips a paused queue, so it holds for every worker of every
process at once; running tasks finish, enqueues still land.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := backstop.CheckReason("--reason", reason, false); err != nil {
				return err
			}
			out, err := a.pauseQueue(backstop.WithReason(cmd.Context(), reason), args[0], pause, actor)
			if err != nil {
				return err
			}
			return a.print(out, func(w io.Writer) error {
				switch {
				case pause && out.Changed:
					fmt.Fprintf(w, "paused queue %s\n", out.Name)
				case pause:
					fmt.Fprintf(w, "queue %s was already paused (since %s by %s)\n", out.Name, fmtTime(out.Pause.PausedAt), out.Pause.PausedBy)
				case out.Changed:
					fmt.Fprintf(w, "resumed queue %s\n", out.Name)
				default:
					fmt.Fprintf(w, "queue %s was not paused\n", out.Name)
				}
				return nil
			})
		},
	}
	addActorFlag(cmd, &actor)
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the actor in the audit stream: backstop audit list)")
	return cmd
}
