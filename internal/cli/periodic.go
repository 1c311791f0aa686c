package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/schedule"
)

func init() { register(periodicCmd) }

func periodicCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "periodic",
		Short: "Periodic tasks: add, list, pause, resume and remove schedules",
		Long: `Periodic tasks: a schedule (a cron expression in a time zone, or a fixed
interval) and the task each tick enqueues. The elected maintenance leader
(in whichever serve or work process holds it) enqueues exactly one task per
tick; ticks missed while no leader ran follow the schedule's --missed policy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("periodic: name a subcommand: add, list, pause, resume or remove")
		},
	}
	cmd.AddCommand(periodicAddCmd(a), periodicListCmd(a), periodicPauseCmd(a, true), periodicPauseCmd(a, false), periodicRemoveCmd(a))
	return cmd
}

type periodicAddFlags struct {
	every                                time.Duration
	cron, tz, queue, kind, payload, miss string
	attrs                                []string
	priority, maxAttempts                int
	replace                              bool
}

func periodicAddCmd(a *app) *cobra.Command {
	var f periodicAddFlags
	cmd := &cobra.Command{
		Use:   "add NAME (--every D | --cron EXPR [--tz ZONE]) --queue Q --kind K",
		Short: "Add a schedule",
		Long: `Add a schedule named NAME. --every D ticks on the multiples of D (whole
seconds, at least 1s: --every 1m ticks at each minute); --cron EXPR takes five
fields, or six with seconds first, or a descriptor (@hourly), read in --tz
(an IANA zone, default UTC). --missed says what happens to ticks missed while
no leader ran (older than a minute): skip (default; each skipped tick is a
schedule.skipped event and counted), once (one task for them), all (every one,
at most 100).`,
		Example: `  backstop periodic add nightly --cron "0 3 * * *" --tz Europe/Paris --queue reports --kind nightly
  backstop periodic add heartbeat --every 30s --queue ops --kind ping --payload '{"k":1}' --missed once`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("periodic add: give the schedule's NAME (one argument)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := periodicParams(cmd, args[0], &f)
			if err != nil {
				return err
			}
			in, err := a.addSchedule(cmd.Context(), p, f.every)
			if err != nil {
				return err
			}
			return a.print(in, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "schedule %s: %s, next run %s\n", in.Name, in.Schedule, fmtTime(in.NextRunAt))
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.every, "every", 0, "a fixed interval (whole seconds, at least 1s)")
	fl.StringVar(&f.cron, "cron", "", "a cron expression (5 fields, or 6 with seconds first)")
	fl.StringVar(&f.tz, "tz", "", "the cron expression's time zone (IANA name; default UTC)")
	fl.StringVar(&f.queue, "queue", "", "the task's queue (required)")
	fl.StringVar(&f.kind, "kind", "", "the task's kind (required)")
	fl.StringVar(&f.payload, "payload", "", "the task's payload, JSON (default {})")
	fl.StringArrayVar(&f.attrs, "attr", nil, "the task's attribute key=value (repeatable)")
	fl.IntVar(&f.priority, "priority", 0, "the task's priority")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "the task's max attempts")
	fl.StringVar(&f.miss, "missed", "skip", "missed ticks: skip, once or all")
	fl.BoolVar(&f.replace, "replace", false, "replace a schedule of that name (else exit 4)")
	return cmd
}

// periodicParams checks the flags of periodic add before anything is
// opened: each refusal names its flag (exit 2), nothing is written.
func periodicParams(cmd *cobra.Command, name string, f *periodicAddFlags) (backstop.ScheduleParams, error) {
	p := backstop.ScheduleParams{Name: name, Cron: f.cron, TZ: f.tz, Queue: f.queue, Kind: f.kind, Priority: f.priority,
		MaxAttempts: f.maxAttempts, Replace: f.replace}
	fl := cmd.Flags()
	switch {
	case fl.Changed("every") && fl.Changed("cron"):
		return p, usageErr("periodic add: give --every or --cron, not both")
	case !fl.Changed("every") && !fl.Changed("cron"):
		return p, usageErr("periodic add: give --every D or --cron EXPR")
	case fl.Changed("tz") && !fl.Changed("cron"):
		return p, usageErr("periodic add: --tz applies to --cron, not to --every")
	case f.queue == "":
		return p, usageErr("periodic add: --queue is required")
	case f.kind == "":
		return p, usageErr("periodic add: --kind is required")
	}
	p.Every = f.every
	if _, err := schedule.Parse(schedule.Spec{Every: f.every, Cron: f.cron, TZ: f.tz}); err != nil {
		var fe *schedule.FieldError
		if errors.As(err, &fe) {
			return p, usageErr("periodic add: --%s: %s", fe.Field, fe.Msg)
		}
		return p, usageErr("periodic add: %v", err)
	}
	m, err := schedule.ParseMissed(f.miss)
	if err != nil {
		return p, usageErr("periodic add: --missed %q: want skip, once or all", f.miss)
	}
	p.Missed = string(m)
	if f.payload != "" {
		if !json.Valid([]byte(f.payload)) {
			return p, usageErr("periodic add: --payload is not valid JSON")
		}
		p.Payload = json.RawMessage(f.payload)
	}
	if p.Attributes, err = parseAttrs(f.attrs); err != nil {
		return p, err
	}
	return p, nil
}

// addSchedule adds a schedule on the database or through the API.
func (a *app) addSchedule(ctx context.Context, p backstop.ScheduleParams, every time.Duration) (*backstop.ScheduleInfo, error) {
	if a.server != "" {
		req := api.ScheduleRequest{ScheduleParams: p}
		if every > 0 {
			req.Every = every.String()
		}
		in, err := apiclient.New(a.server, a.token).AddSchedule(ctx, req)
		return in, remoteErr(err)
	}
	s, c, err := a.openDB(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.AddSchedule(ctx, p)
}

func periodicListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Every schedule: its timing, next and last run, last outcome, paused",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var items []backstop.ScheduleInfo
			var err error
			if a.server != "" {
				items, err = apiclient.New(a.server, a.token).Schedules(cmd.Context())
				err = remoteErr(err)
			} else {
				s, c, oerr := a.openDB(cmd.Context(), nil)
				if oerr != nil {
					return oerr
				}
				defer s.Close()
				items, err = c.Schedules(cmd.Context())
			}
			if err != nil {
				return err
			}
			if items == nil {
				items = []backstop.ScheduleInfo{}
			}
			return a.print(items, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "NAME\tSCHEDULE\tQUEUE\tKIND\tNEXT RUN\tLAST RUN\tLAST OUTCOME\tPAUSED")
				for _, s := range items {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", s.Name, s.Schedule, s.Queue, s.Kind, fmtTime(s.NextRunAt),
						fmtTimePtr(s.LastRunAt), orDash(s.LastOutcome), s.Paused)
				}
				return tw.Flush()
			})
		},
	}
}

func periodicPauseCmd(a *app, pause bool) *cobra.Command {
	use, short := "resume NAME", "Let a paused schedule tick again, from its next tick after now"
	if pause {
		use, short = "pause NAME", "Stop a schedule's ticks until resume"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("periodic %s: give the schedule's NAME (one argument)", cmd.Name())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var in *backstop.ScheduleInfo
			var err error
			if a.server != "" {
				in, err = apiclient.New(a.server, a.token).SetSchedulePaused(cmd.Context(), args[0], pause)
				err = remoteErr(err)
			} else {
				s, c, oerr := a.openDB(cmd.Context(), nil)
				if oerr != nil {
					return oerr
				}
				defer s.Close()
				if pause {
					in, err = c.PauseSchedule(cmd.Context(), args[0])
				} else {
					in, err = c.ResumeSchedule(cmd.Context(), args[0])
				}
			}
			if err != nil {
				return err
			}
			return a.print(in, func(w io.Writer) error {
				state := "resumed, next run " + fmtTime(in.NextRunAt)
				if in.Paused {
					state = "paused"
				}
				_, err := fmt.Fprintf(w, "schedule %s: %s\n", in.Name, state)
				return err
			})
		},
	}
}

func periodicRemoveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a schedule (the tasks it enqueued stay)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("periodic remove: give the schedule's NAME (one argument)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.server != "" {
				if err := apiclient.New(a.server, a.token).RemoveSchedule(cmd.Context(), args[0]); err != nil {
					return remoteErr(err)
				}
			} else {
				s, c, err := a.openDB(cmd.Context(), nil)
				if err != nil {
					return err
				}
				defer s.Close()
				if err := c.RemoveSchedule(cmd.Context(), args[0]); err != nil {
					return err
				}
			}
			return a.print(map[string]any{"name": args[0], "removed": true}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "schedule %s removed\n", args[0])
				return err
			})
		},
	}
}

// putConfigSchedules stores the configuration's schedules at the start of
// serve and work, each replacing a stored one of its name (its next tick
// kept when its timing is unchanged).
func putConfigSchedules(ctx context.Context, c *backstop.Client, cfg *config.Config, log *slog.Logger) error {
	for _, p := range cfg.ScheduleParams() {
		if _, err := c.AddSchedule(ctx, p); err != nil {
			return fmt.Errorf("schedules.%s: %w", p.Name, err)
		}
		log.Debug("schedule from the configuration", "schedule", p.Name)
	}
	return nil
}
