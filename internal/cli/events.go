package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

func init() { register(eventsCmd) }

// cliActor names the operator of the CLI's enqueues and cancels in their
// events: cli:<os user>.
func cliActor(ctx context.Context) context.Context {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return backstop.WithActor(ctx, "cli:"+name)
}

func eventsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Read the event log",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("events: name a subcommand: tail")
		},
	}
	cmd.AddCommand(eventsTailCmd(a))
	return cmd
}

func eventsTailCmd(a *app) *cobra.Command {
	var (
		p      backstop.ReadEventsParams
		follow bool
		poll   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print a stream of the event log after a cursor; --follow keeps printing new events",
		Long: `tail prints the events of a stream in log order, after the cursor --after
(an event's cursor, or the "next" of a previous page; empty: the beginning).

Streams: all, type.<type> (e.g. type.task.dead_lettered), task.<id>,
queue.<name>, run.<run_id>, worker.<id>, execution.<id> (one attempt's
events), node.<host> (the events of the host's workers and of the attempts
they ran); docs/events.md.

Without --follow it prints one page (--limit events) and, when more may
follow, the cursor to continue from on stderr. With --follow it keeps
printing new events until interrupted; with -o json, one JSON event per line.
A read that fails while following (the database restarting, a dropped
connection) is retried with backoff from the last printed event, with a
note on stderr: nothing is skipped or printed twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Limit < 1 || p.Limit > 1000 {
				return usageErr("--limit %d: must be between 1 and 1000", p.Limit)
			}
			if poll <= 0 {
				return usageErr("--poll must be positive")
			}
			read, done, err := a.eventReader(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			page, err := read(ctx, p)
			if err != nil {
				return err
			}
			if !follow {
				if a.output == "table" && len(page.Events) == p.Limit {
					fmt.Fprintf(a.stderr, "(more may follow: --after %s)\n", page.Next)
				}
				return a.print(page, func(w io.Writer) error {
					for _, e := range page.Events {
						if _, err := fmt.Fprintln(w, eventLine(e)); err != nil {
							return err
						}
					}
					return nil
				})
			}
			enc := json.NewEncoder(a.stdout)
			failures := 0
			for {
				for _, e := range page.Events {
					if a.output == "json" {
						err = enc.Encode(e)
					} else {
						_, err = fmt.Fprintln(a.stdout, eventLine(e))
					}
					if err != nil {
						return err
					}
				}
				p.After = page.Next
				if len(page.Events) < p.Limit {
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(poll):
					}
				}
				for {
					if page, err = read(ctx, p); err == nil {
						failures = 0
						break
					}
					if ctx.Err() != nil || errors.Is(err, context.Canceled) {
						return nil
					}
					if !followRetryable(ctx, err) {
						return err
					}
					// The database went away (a restart, the network):
					// read again after the last printed event.
					wait := backstop.ReadBackoff(failures)
					failures++
					fmt.Fprintf(a.stderr, "events tail: reading failed (%v); retrying in %s after %q\n", err, wait, p.After)
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(wait):
					}
				}
			}
		},
	}
	cmd.Flags().StringVar(&p.Stream, "stream", "all", "the stream: all, type.<type>, task.<id>, queue.<name>, run.<run_id>, worker.<id>, execution.<id>, node.<host>")
	cmd.Flags().StringVar(&p.After, "after", "", "cursor: print events after this one")
	cmd.Flags().IntVar(&p.Limit, "limit", 100, "events per page (1-1000)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	cmd.Flags().DurationVar(&poll, "poll", 500*time.Millisecond, "with --follow: how often to look for new events")
	return cmd
}

// eventReader reads pages of the event log from the database or, with
// --server, from GET /v1/events (bodies masked either way, docs/redaction.md);
// done closes what it opened.
func (a *app) eventReader(ctx context.Context) (read func(context.Context, backstop.ReadEventsParams) (backstop.EventPage, error), done func(), err error) {
	if a.server != "" {
		cl := apiclient.New(a.server, a.token)
		return func(ctx context.Context, p backstop.ReadEventsParams) (backstop.EventPage, error) {
			page, err := cl.Events(ctx, p)
			if err != nil {
				// The follower retries what the HTTP client calls
				// retryable (5xx, 429, connection errors), never a 4xx
				// such as a revoked token.
				retry, _ := apiclient.Retryable(err)
				return page, serverReadError{remoteErr(err), retry}
			}
			return page, nil
		}, func() {}, nil
	}
	s, c, err := a.openDB(ctx, &backstop.Config{RedactKeys: a.redactKeys()})
	if err != nil {
		return nil, nil, err
	}
	// The bodies' payload fragments are masked as the server masks them.
	m := c.Masker()
	return func(ctx context.Context, p backstop.ReadEventsParams) (backstop.EventPage, error) {
		page, err := c.ReadEvents(ctx, p)
		for i, e := range page.Events {
			if len(e.Body) > 0 {
				page.Events[i].Body = backstop.MaskEventBody(m, e.Body)
			}
		}
		return page, err
	}, func() { s.Close() }, nil
}

// serverReadError is a failed read of GET /v1/events, with whether the
// HTTP client judged it worth retrying.
type serverReadError struct {
	error
	retry bool
}

func (e serverReadError) Unwrap() error { return e.error }

// followRetryable says whether a follower reads again after err: the
// database's errors by the library's rule, the server's by the HTTP client's.
func followRetryable(ctx context.Context, err error) bool {
	var se serverReadError
	if errors.As(err, &se) {
		return ctx.Err() == nil && se.retry
	}
	return backstop.ReadRetryable(ctx, err)
}

// eventLine is one event on one line: cursor, time, type, subject, queue,
// actor, and what its body says.
func eventLine(e bt.Event) string {
	actor := ""
	if e.Actor != "" {
		actor = " by " + e.Actor
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s%s\t%s", e.Cursor, fmtTime(e.Time), e.Type, e.Subject, e.Queue, actor, oneLine(string(e.Body), 160))
}

// printTimeline prints a task's history as a timeline: what happened, in
// order, from its events (enqueue, claims, attempts with outcomes, dead
// letter, replays, cancel), then how far it got.
func printTimeline(w io.Writer, t *bt.Task, events []bt.Event) error {
	fmt.Fprintf(w, "\ntimeline (%d events):\n", len(events))
	if len(events) == 0 {
		fmt.Fprintln(w, "  no events (written before the event log, or deleted by retention)")
	}
	tw := newTable(w)
	for _, e := range events {
		fmt.Fprintf(tw, "  %s\t%s\n", fmtTime(e.Time), timelineText(e))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "  now: %s, attempt %d of %d%s\n", t.State, t.Attempt, t.MaxAttempts, progressText(t.Progress))
	return err
}

func progressText(p bt.Progress) string {
	if p.Total == 0 && p.Completed == 0 {
		return ""
	}
	return fmt.Sprintf(", progress %s", fmtProgress(p))
}

// operatorReason is the reason an operator gave for the action an event
// records ("" for none; a dead letter's own reason is not one).
func operatorReason(e bt.Event) string {
	if e.Type == store.EventDeadLettered {
		return ""
	}
	var b struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(e.Body, &b)
	return b.Reason
}

// timelineText says what one event means.
func timelineText(e bt.Event) string {
	var b map[string]any
	_ = json.Unmarshal(e.Body, &b)
	s := func(k string) string {
		switch v := b[k].(type) {
		case string:
			return v
		case float64:
			return fmt.Sprint(v)
		case bool:
			return fmt.Sprint(v)
		}
		return ""
	}
	by := ""
	if e.Actor != "" {
		by = " by " + e.Actor
	}
	att := "attempt " + s("attempt")
	why := "" // the operator's reason, after the actor
	if r := operatorReason(e); r != "" {
		why = ": " + oneLine(r, 200)
	}
	switch e.Type {
	case "task.enqueued":
		switch {
		case s("merged") == "true":
			return fmt.Sprintf("enqueue of %s merged into it%s", s("incoming_id"), by)
		case s("duplicate") == "true":
			return fmt.Sprintf("enqueue of %s was a duplicate of it%s", s("incoming_id"), by)
		}
		return fmt.Sprintf("enqueued (%s, run at %s)%s", s("state"), s("run_at"), by)
	case "task.claimed":
		return fmt.Sprintf("%s claimed by worker %s (execution %s)", att, s("worker_id"), s("execution_id"))
	case "task.started":
		return att + " started"
	case "task.progress":
		return fmt.Sprintf("progress %s/%s", s("completed"), s("total"))
	case "task.succeeded":
		return fmt.Sprintf("%s succeeded in %sms", att, s("duration_ms"))
	case "task.failed":
		return fmt.Sprintf("%s failed: %s %s", att, s("outcome"), oneLine(s("error"), 100))
	case "task.lease_expired":
		return fmt.Sprintf("%s: lease expired (worker %s)", att, s("worker_id"))
	case "task.retry_scheduled":
		return fmt.Sprintf("retry scheduled at %s (in %sms)", s("run_at"), s("delay_ms"))
	case "task.snoozed":
		return fmt.Sprintf("%s snoozed until %s", att, s("run_at"))
	case "task.released":
		return fmt.Sprintf("%s released on shutdown (not counted)", att)
	case "task.dead_lettered":
		return fmt.Sprintf("dead letter: %s after attempt %s", s("reason"), s("attempt"))
	case "task.cancel_requested":
		return "cancel requested" + by + why
	case "task.canceled":
		return "canceled" + by + why
	case "dlq.replay_requested":
		return "replay requested" + by + why
	case "dlq.replayed":
		return "replayed" + by + why
	case "dlq.replay_failed":
		return fmt.Sprintf("replay refused: %s%s%s", s("error"), by, why)
	case "dlq.discarded":
		return fmt.Sprintf("discarded: %s%s", s("reason"), by)
	case "dlq.resolved":
		if n, r := s("note"), s("reason"); n != "" && r != "" && n != r {
			return fmt.Sprintf("resolved: %s (note: %s)%s", r, n, by)
		}
		return fmt.Sprintf("resolved: %s%s", cmp.Or(s("reason"), s("note")), by)
	}
	return strings.TrimSpace(e.Type + by + " " + oneLine(string(e.Body), 120))
}
