package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

func init() { register(queuesCmd) }

func queuesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List queues; pause and resume claiming from a queue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("queues: name a subcommand: list, pause or resume")
		},
	}
	cmd.AddCommand(queuesListCmd(a), queuesPauseCmd(a, true), queuesPauseCmd(a, false))
	return cmd
}

func queuesListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Every queue that holds tasks or is paused, with task counts by state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, c, err := a.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer s.Close()
			qs, err := c.Queues(cmd.Context())
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
					for _, st := range bt.States {
						fmt.Fprintf(tw, "\t%d", q.Counts[st])
					}
					fmt.Fprintf(tw, "\t%d\n", q.Total)
				}
				return tw.Flush()
			})
		},
	}
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
	var actor string
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
			s, c, err := a.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer s.Close()
			out := queuePauseJSON{Name: args[0], Paused: pause}
			if pause {
				st, changed, err := c.PauseQueue(cmd.Context(), args[0], actor)
				if err != nil {
					return err
				}
				out.Changed, out.Pause = changed, &st
			} else {
				if out.Changed, err = c.ResumeQueue(cmd.Context(), args[0], actor); err != nil {
					return err
				}
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
	return cmd
}
