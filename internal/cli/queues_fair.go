package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

// fairJSON is what `queues fair` prints.
type fairJSON struct {
	Queue   string         `json:"queue"`
	Fair    bool           `json:"fair"`
	By      string         `json:"by,omitempty"`
	Weights map[string]int `json:"weights,omitempty"`
	Changed bool           `json:"changed"`
}

func queuesFairCmd(a *app) *cobra.Command {
	var (
		by, actor, reason string
		weights           []string
		off, list         bool
	)
	cmd := &cobra.Command{
		Use:   "fair (QUEUE (--by ATTR [--weight VALUE=N]... | --off) | --list)",
		Short: "Make claims in a queue rotate across the values of an attribute (or --off); --list the fair queues",
		Long: `Make the queue fair by an attribute: its claims rotate across the attribute's
values (weighted round robin), so a value with many queued tasks does not
hold back one with a few. Priority first, then fairness within a priority.
--weight VALUE=N gives a value N shares (default 1). Recorded in the store:
every process's claims follow within a second. --off turns it off
Each change is recorded in the audit stream with --actor and --reason
(backstop audit list) (docs/fairness.md).
--list lists the fair queues: each one's attribute and weights, and how
many tasks of each value are pending (the busiest 100 values, most first).`,
		Example: `  backstop queues fair crm --by tenant
  backstop queues fair crm --by tenant --weight acme=3 --weight beta=2
  backstop queues fair crm --off
  backstop queues fair --list -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				if len(args) > 0 || off || by != "" || len(weights) > 0 || cmd.Flags().Changed("actor") || reason != "" {
					return usageErr("--list takes no QUEUE, --by, --weight, --off, --actor or --reason")
				}
				return a.listFair(cmd.Context())
			}
			if len(args) == 0 {
				return usageErr("name the QUEUE to make fair (or --list the fair queues)")
			}
			out := fairJSON{Queue: args[0]}
			switch {
			case off && (by != "" || len(weights) > 0):
				return usageErr("--off takes no --by or --weight")
			case !off && by == "":
				return usageErr("give --by ATTR (or --off)")
			}
			w, err := parseWeights(weights)
			if err != nil {
				return err
			}
			if err := backstop.CheckReason("--reason", reason, false); err != nil {
				return err
			}
			ctx := backstop.WithReason(cmd.Context(), reason)
			if off {
				out.Changed, err = a.removeFair(ctx, args[0], actor)
			} else {
				out.Fair, out.By, out.Weights, out.Changed = true, by, w, true
				err = a.setFair(ctx, backstop.FairQueue{Queue: args[0], By: by, Weights: w}, actor)
			}
			if err != nil {
				return err
			}
			return a.print(out, func(w io.Writer) error {
				switch {
				case out.Fair:
					fmt.Fprintf(w, "queue %s is fair by %s\n", out.Queue, out.By)
				case out.Changed:
					fmt.Fprintf(w, "queue %s is no longer fair\n", out.Queue)
				default:
					fmt.Fprintf(w, "queue %s was not fair\n", out.Queue)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "attribute whose values share the queue's claims, e.g. tenant")
	cmd.Flags().StringArrayVar(&weights, "weight", nil, "VALUE=N: the value's shares (default 1; repeatable)")
	cmd.Flags().BoolVar(&off, "off", false, "turn the queue's fairness off")
	cmd.Flags().BoolVar(&list, "list", false, "list the fair queues with their pending tasks by value")
	addActorFlag(cmd, &actor)
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the actor in the audit stream: backstop audit list)")
	return cmd
}

// parseWeights reads VALUE=N pairs; N is a whole number (the library
// checks its range).
func parseWeights(pairs []string) (map[string]int, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := map[string]int{}
	for _, p := range pairs {
		v, n, ok := strings.Cut(p, "=")
		w, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, usageErr("--weight %q: want VALUE=N with N a whole number", p)
		}
		if _, dup := out[v]; dup {
			return nil, usageErr("--weight: value %q given twice", v)
		}
		out[v] = w
	}
	return out, nil
}

// applyFair sets the configuration's fair queues in the database when
// `serve` or `work` starts; one already set alike is left as it is (its
// rotation goes on). A queue the file does not make fair is left alone.
func applyFair(ctx context.Context, c *backstop.Client, fs []backstop.FairQueue, log *slog.Logger) error {
	if len(fs) == 0 {
		return nil
	}
	have, err := c.FairQueues(ctx)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if slices.ContainsFunc(have, func(h backstop.FairQueue) bool {
			return h.Queue == f.Queue && h.By == f.By && maps.Equal(h.Weights, f.Weights)
		}) {
			continue
		}
		_, err := c.SetFair(ctx, f, "config")
		if errors.Is(err, store.ErrPermissionDenied) {
			log.Warn("the configuration's fairness was not set: this database role may not set it", "queue", f.Queue, "error", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("queue %s: fair: %w", f.Queue, err)
		}
	}
	return nil
}

// setFair makes a queue fair on the database or through the API (whose
// actor is the token's name).
func (a *app) setFair(ctx context.Context, f backstop.FairQueue, actor string) error {
	if a.server != "" {
		_, err := apiclient.New(a.server, a.token).SetFair(ctx, f.Queue,
			api.FairRequest{By: f.By, Weights: f.Weights, Reason: store.ReasonFrom(ctx)})
		return remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = c.SetFair(ctx, f, actor)
	return err
}

// removeFair turns a queue's fairness off; false: it was not fair.
func (a *app) removeFair(ctx context.Context, queue, actor string) (bool, error) {
	if a.server != "" {
		_, err := apiclient.New(a.server, a.token).RemoveFair(ctx, queue, store.ReasonFrom(ctx))
		var pr *api.Problem
		if errors.As(err, &pr) && pr.Status == http.StatusNotFound {
			return false, nil
		}
		return err == nil, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return false, err
	}
	defer s.Close()
	return c.RemoveFair(ctx, queue, actor)
}

// listFair prints the fair queues with their pending tasks by value, from
// the database or through the API (GET /v1/fair-queues).
func (a *app) listFair(ctx context.Context) error {
	var fs []backstop.FairQueueStatus
	if a.server != "" {
		var err error
		if fs, err = apiclient.New(a.server, a.token).FairQueues(ctx); err != nil {
			return remoteErr(err)
		}
	} else {
		s, c, err := a.openDB(ctx, nil)
		if err != nil {
			return err
		}
		defer s.Close()
		if fs, err = c.FairQueueStatuses(ctx); err != nil {
			return err
		}
	}
	if fs == nil {
		fs = []backstop.FairQueueStatus{}
	}
	return a.print(fs, func(w io.Writer) error {
		tw := newTable(w)
		fmt.Fprintln(tw, "QUEUE\tBY\tVALUE\tWEIGHT\tPENDING")
		for _, f := range fs {
			if len(f.Values) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t0\n", f.Queue, f.By)
			}
			for _, v := range f.Values {
				value := v.Value
				if value == "" {
					value = "(none)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", f.Queue, f.By, value, v.Weight, v.Pending)
			}
		}
		return tw.Flush()
	})
}
