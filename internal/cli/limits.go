package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

func init() { register(limitsCmd) }

func limitsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Cluster-wide concurrency and rate limits: set, list, remove",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("limits: name a subcommand: set, list or remove")
		},
	}
	cmd.AddCommand(limitsSetCmd(a), limitsListCmd(a), limitsRemoveCmd(a))
	return cmd
}

func limitsSetCmd(a *app) *cobra.Command {
	var (
		l             backstop.Limit
		actor, reason string
	)
	cmd := &cobra.Command{
		Use:   "set NAME --queue Q [--kind K] [--per ATTR] (--concurrency N | --rate R [--burst B])",
		Short: "Create or replace a limit: at most N of the scope's tasks running at once, or R starting per second, in the whole cluster",
		Long: `Create or replace a limit on the tasks of the queue (of --kind, when
given; per value of the attribute --per, when given: one budget per
tenant), across every process on the database:

  --concurrency N   at most N run at once;
  --rate R          at most R start per second (R may be fractional:
                    0.5 is one every 2 s), with bursts of up to --burst
                    (default max(1, ceil(R)): one second's starts).

The claim enforces it in the database; a task held back stays pending, is
not charged an attempt, and says why it waits (tasks show). A running
process's claims see a new limit within a second.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conc, rate := cmd.Flags().Changed("concurrency"), cmd.Flags().Changed("rate")
			switch {
			case conc && rate:
				return usageErr("limits set: give --concurrency N or --rate R, not both")
			case !conc && !rate:
				return usageErr("limits set: --concurrency N or --rate R is required")
			case cmd.Flags().Changed("burst") && !rate:
				return usageErr("limits set: --burst is the burst of a --rate limit")
			case cmd.Flags().Changed("burst") && l.Burst < 1:
				return usageErr("--burst %d: want a whole number of starts from 1 (default: max(1, ceil(rate)))", l.Burst)
			case rate && l.Rate <= 0:
				// 0 would otherwise read as "no rate" and ask for a concurrency.
				return usageErr("--rate %v: want starts per second above 0", l.Rate)
			}
			if err := backstop.CheckReason("--reason", reason, false); err != nil {
				return err
			}
			l.Name = args[0]
			out, err := a.setLimit(backstop.WithReason(cmd.Context(), reason), l, actor)
			if err != nil {
				return err
			}
			return a.print(out, func(w io.Writer) error {
				if out.Rate > 0 {
					_, err := fmt.Fprintf(w, "limit %s: at most %s starts a second, bursts of %d (%s)\n", out.Name,
						formatRate(out.Rate), out.Burst, limitScope(out))
					return err
				}
				_, err := fmt.Fprintf(w, "limit %s: at most %d running at once (%s)\n", out.Name, out.Concurrency, limitScope(out))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&l.Queue, "queue", "", "the queue the limit applies to (required)")
	f.StringVar(&l.Kind, "kind", "", "only tasks of this kind (default: every kind of the queue)")
	f.StringVar(&l.Per, "per", "", "an attribute: one budget per value of it (e.g. tenant)")
	f.IntVar(&l.Concurrency, "concurrency", 0, "at most this many running at once (per value, with --per)")
	f.Float64Var(&l.Rate, "rate", 0, "at most this many starts per second (per value, with --per)")
	f.IntVar(&l.Burst, "burst", 0, "a --rate limit's burst: starts at once after a quiet spell (default max(1, ceil(rate)))")
	addActorFlag(cmd, &actor)
	f.StringVar(&reason, "reason", "", "why (recorded with the actor in the audit stream: backstop audit list)")
	return cmd
}

// formatRate writes a number as its shortest decimal ("50", "0.5").
func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

func limitScope(l backstop.Limit) string {
	s := "queue " + l.Queue
	if l.Kind != "" {
		s += ", kind " + l.Kind
	}
	if l.Per != "" {
		s += ", per " + l.Per
	}
	return s
}

func limitsListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Every limit with its use: running tasks, a rate limit's tokens, and tasks waiting on it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ls, err := a.limits(cmd.Context())
			if err != nil {
				return err
			}
			if ls == nil {
				ls = []backstop.LimitStatus{}
			}
			return a.print(ls, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "NAME\tSCOPE\tLIMIT\tVALUE\tIN USE\tWAITING\tBURST\tTOKENS")
				for _, l := range ls {
					value, burst, tokens := formatRate(l.Value), "-", "-"
					if l.Type == store.LimitRate {
						value += "/s"
						burst = fmt.Sprint(l.Burst)
						if l.Tokens != nil {
							tokens = strconv.FormatFloat(*l.Tokens, 'f', 1, 64)
						}
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", l.Name, l.Scope, l.Type, value, l.InUse, l.Waiting, burst, tokens)
				}
				return tw.Flush()
			})
		},
	}
}

func limitsRemoveCmd(a *app) *cobra.Command {
	var actor, reason string
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a limit (its tasks are claimed as usual again)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := backstop.CheckReason("--reason", reason, false); err != nil {
				return err
			}
			if err := a.removeLimit(backstop.WithReason(cmd.Context(), reason), args[0], actor); err != nil {
				return err
			}
			out := api.LimitRemoveResponse{Name: args[0], Removed: true}
			return a.print(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "removed limit %s\n", out.Name)
				return err
			})
		},
	}
	addActorFlag(cmd, &actor)
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the actor in the audit stream: backstop audit list)")
	return cmd
}

// setLimit sets a limit on the database or through the API.
func (a *app) setLimit(ctx context.Context, l backstop.Limit, actor string) (backstop.Limit, error) {
	if a.server != "" {
		out, err := apiclient.New(a.server, a.token).SetLimit(ctx, l.Name, api.LimitRequest{Queue: l.Queue, Kind: l.Kind,
			Per: l.Per, Concurrency: l.Concurrency, Rate: l.Rate, Burst: l.Burst, Reason: store.ReasonFrom(ctx)})
		if err != nil {
			return backstop.Limit{}, remoteErr(err)
		}
		return *out, nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return backstop.Limit{}, err
	}
	defer s.Close()
	return c.SetLimit(ctx, l, actor)
}

// limits lists the limits with their use, on the database or through the
// API.
func (a *app) limits(ctx context.Context) ([]backstop.LimitStatus, error) {
	if a.server != "" {
		r, err := apiclient.New(a.server, a.token).Limits(ctx)
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
	return c.Limits(ctx)
}

// removeLimit removes a limit; an unknown name is not found.
func (a *app) removeLimit(ctx context.Context, name, actor string) error {
	if a.server != "" {
		if _, err := apiclient.New(a.server, a.token).RemoveLimit(ctx, name); err != nil {
			return remoteErr(err)
		}
		return nil
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	removed, err := c.RemoveLimit(ctx, name, actor)
	if err == nil && !removed {
		err = fmt.Errorf("%w: no limit named %q", backstop.ErrNotFound, name)
	}
	return err
}

// applyLimits sets the limits the configuration's queues declare (limits
// set otherwise, by the CLI or the API, are left as they are). A role that
// may not set limits (Postgres's backstop_worker) is warned about, not
// stopped: the limits are then an admin's to set.
func applyLimits(ctx context.Context, c *backstop.Client, limits []backstop.Limit, log *slog.Logger) error {
	for _, l := range limits {
		_, err := c.SetLimit(ctx, l, "config")
		if errors.Is(err, store.ErrPermissionDenied) {
			log.Warn("the configuration's limit was not set: this database role may not set limits", "limit", l.Name, "error", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("limit %s of queue %s: %w", l.Name, l.Queue, err)
		}
	}
	return nil
}
