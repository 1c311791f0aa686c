package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// This file is `backstop redrives`: a redrive is a durable job (its record
// and each item's outcome are in the store), listed, shown, canceled and
// resumed from any process, over the database or --server.

func init() { register(redrivesCmd) }

func redrivesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "redrives",
		Short: "Redrives: list, show (with the items that did not replay), cancel, resume",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("redrives: name a subcommand: list, show, cancel or resume")
		},
	}
	cmd.AddCommand(redrivesListCmd(a), redrivesShowCmd(a), redrivesCancelCmd(a), redrivesResumeCmd(a))
	return cmd
}

// redriveHeartbeat is dlq.redrive_heartbeat for the commands that work on
// the database (envSettings; 0: the library's default).
func redriveHeartbeat() (time.Duration, error) {
	c, err := envSettings("DLQ_REDRIVE_HEARTBEAT")
	if err != nil {
		return 0, err
	}
	return c.DLQ.RedriveHeartbeat.D(), nil
}

// redriveJSON is a redrive as the redrives commands print it.
type redriveJSON struct {
	ID         string          `json:"id"`
	Status     string          `json:"status"`
	Filter     json.RawMessage `json:"filter,omitempty"`
	Snapshot   time.Time       `json:"snapshot"`
	Cursor     string          `json:"cursor"`
	Replayed   int             `json:"replayed"`
	Failed     int             `json:"failed"`
	Outcomes   map[string]int  `json:"outcomes"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	// The process running it ("" when none), when a runner was last seen,
	// whether one is alive, whether it can be resumed without --force.
	Runner      string                 `json:"runner,omitempty"`
	HeartbeatAt *time.Time             `json:"heartbeat_at,omitempty"`
	RunnerAlive bool                   `json:"runner_alive"`
	Resumable   bool                   `json:"resumable"`
	Items       []backstop.RedriveItem `json:"items,omitempty"`
}

// liveness says who runs a redrive: "running, last seen 2s ago" or
// "running, no runner seen for 10m0s: resumable".
func (r redriveJSON) liveness(now time.Time) string {
	if r.Status == backstop.RedriveDone {
		return r.Status
	}
	at := r.StartedAt
	if r.HeartbeatAt != nil {
		at = *r.HeartbeatAt
	}
	ago := max(0, now.Sub(at)).Round(time.Second)
	if r.RunnerAlive {
		return fmt.Sprintf("%s, last seen %s ago", r.Status, ago)
	}
	return fmt.Sprintf("%s, no runner seen for %s: resumable", r.Status, ago)
}

func fromRecord(rec *backstop.RedriveRecord, mask func(json.RawMessage) json.RawMessage) redriveJSON {
	o := rec.Outcomes
	if o == nil {
		o = map[string]int{}
	}
	return redriveJSON{ID: rec.ID, Status: rec.Status, Filter: mask(rec.Filter), Snapshot: rec.Snapshot, Cursor: rec.Cursor,
		Replayed: rec.Replayed, Failed: rec.Failed, Outcomes: o, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt,
		Runner: rec.Runner, HeartbeatAt: rec.HeartbeatAt, RunnerAlive: rec.RunnerAlive, Resumable: rec.Resumable}
}

func fromStatus(st *api.RedriveStatus) redriveJSON {
	o := st.Outcomes
	if o == nil {
		o = map[string]int{}
	}
	return redriveJSON{ID: st.RedriveID, Status: st.Status, Filter: st.Filter, Snapshot: st.Snapshot, Cursor: st.Cursor,
		Replayed: st.Replayed, Failed: st.Failed, Outcomes: o, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		Runner: st.Runner, HeartbeatAt: st.HeartbeatAt, RunnerAlive: st.RunnerAlive, Resumable: st.Resumable}
}

// redriveJobs is what the redrives commands need, over the database or a
// server.
type redriveJobs interface {
	list(ctx context.Context, before string, limit int) ([]redriveJSON, error)
	get(ctx context.Context, id string) (redriveJSON, error)
	items(ctx context.Context, id string, outcomes []string, failed bool, after string, limit int) ([]backstop.RedriveItem, error)
	cancel(ctx context.Context, id string) (redriveJSON, error)
	resume(ctx context.Context, id string, p backstop.RedriveParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error)
}

func (a *app) redriveJobs(ctx context.Context) (redriveJobs, func() error, error) {
	c, err := a.backend(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	switch b := c.(type) {
	case *localBackend:
		return localJobs{b}, c.Close, nil
	case *remoteBackend:
		return remoteJobs{b}, c.Close, nil
	}
	c.Close()
	return nil, nil, fmt.Errorf("redrives: unknown backend %T", c)
}

type localJobs struct{ l *localBackend }

func (j localJobs) mask(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return b
	}
	return backstop.MaskEventBody(j.l.mask, b)
}

func (j localJobs) list(ctx context.Context, before string, limit int) ([]redriveJSON, error) {
	recs, err := j.l.Client.Redrives(ctx, before, limit)
	if err != nil {
		return nil, err
	}
	out := make([]redriveJSON, 0, len(recs))
	for _, r := range recs {
		full, err := j.l.Client.GetRedrive(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, fromRecord(full, j.mask))
	}
	return out, nil
}

func (j localJobs) get(ctx context.Context, id string) (redriveJSON, error) {
	rec, err := j.l.Client.GetRedrive(ctx, id)
	if err != nil {
		return redriveJSON{}, err
	}
	return fromRecord(rec, j.mask), nil
}

func (j localJobs) items(ctx context.Context, id string, outcomes []string, failed bool, after string, limit int) ([]backstop.RedriveItem, error) {
	return j.l.Client.RedriveItems(ctx, backstop.RedriveItemsParams{ID: id, Outcomes: outcomes, Failed: failed, AfterID: after, Limit: limit})
}

func (j localJobs) cancel(ctx context.Context, id string) (redriveJSON, error) {
	rec, err := j.l.Client.CancelRedrive(ctx, id)
	if err != nil {
		return redriveJSON{}, err
	}
	return fromRecord(rec, j.mask), nil
}

func (j localJobs) resume(ctx context.Context, id string, p backstop.RedriveParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
	return j.l.Client.ResumeRedrive(ctx, id, p, progress)
}

type remoteJobs struct{ r *remoteBackend }

func (j remoteJobs) list(ctx context.Context, before string, limit int) ([]redriveJSON, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if before != "" {
		q.Set("before", before)
	}
	l, err := j.r.cl.Redrives(ctx, q)
	if err != nil {
		return nil, remoteErr(err)
	}
	out := make([]redriveJSON, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, fromRecord(&l.Items[i], func(b json.RawMessage) json.RawMessage { return b }))
	}
	return out, nil
}

func (j remoteJobs) get(ctx context.Context, id string) (redriveJSON, error) {
	st, err := j.r.cl.RedriveStatus(ctx, id)
	if err != nil {
		return redriveJSON{}, remoteErr(err)
	}
	return fromStatus(st), nil
}

func (j remoteJobs) items(ctx context.Context, id string, outcomes []string, failed bool, after string, limit int) ([]backstop.RedriveItem, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if len(outcomes) > 0 {
		q.Set("outcome", strings.Join(outcomes, ","))
	}
	if failed {
		q.Set("failed", "true")
	}
	if after != "" {
		q.Set("after", after)
	}
	l, err := j.r.cl.RedriveItems(ctx, id, q)
	if err != nil {
		return nil, remoteErr(err)
	}
	return l.Items, nil
}

func (j remoteJobs) cancel(ctx context.Context, id string) (redriveJSON, error) {
	st, err := j.r.cl.CancelRedrive(ctx, id)
	if err != nil {
		return redriveJSON{}, remoteErr(err)
	}
	return fromStatus(st), nil
}

func (j remoteJobs) resume(ctx context.Context, id string, p backstop.RedriveParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
	st, err := j.r.cl.ResumeRedrive(ctx, id, api.ResumeRequest{Rate: p.Rate, Limit: p.Limit, Why: p.Reason, Wait: bt.Duration(5 * time.Second),
		Force: p.Force})
	for err == nil && st.Status == "running" {
		progress(st.RedriveProgress)
		select {
		case <-ctx.Done():
			return st.RedriveProgress, fmt.Errorf("stopped waiting; redrive %s goes on in the server (GET /v1/redrives/%s): %w",
				st.RedriveID, st.RedriveID, backstop.ErrInterrupted)
		case <-time.After(remoteRedrivePoll):
		}
		st, err = j.r.cl.RedriveStatus(ctx, st.RedriveID)
	}
	if err != nil {
		return backstop.RedriveProgress{}, remoteErr(err)
	}
	progress(st.RedriveProgress)
	return st.RedriveProgress, redriveEnd(st, "canceled")
}

func printRedrive(w io.Writer, r redriveJSON) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "redrive\t%s\n", r.ID)
	fmt.Fprintf(tw, "status\t%s\n", r.liveness(time.Now()))
	if r.Runner != "" {
		fmt.Fprintf(tw, "runner\t%s\n", r.Runner)
	}
	fmt.Fprintf(tw, "filter\t%s\n", compactOrRaw(r.Filter))
	fmt.Fprintf(tw, "snapshot\t%s\n", fmtTime(r.Snapshot))
	fmt.Fprintf(tw, "started\t%s\n", fmtTime(r.StartedAt))
	fmt.Fprintf(tw, "finished\t%s\n", fmtTimePtr(r.FinishedAt))
	fmt.Fprintf(tw, "cursor\t%s\n", r.Cursor)
	fmt.Fprintf(tw, "replayed\t%d\n", r.Replayed)
	fmt.Fprintf(tw, "failed\t%d\n", r.Failed)
	for _, o := range []string{backstop.OutcomeReplayed, backstop.OutcomeConflict, backstop.OutcomeUnprocessable, backstop.OutcomeNotOpen} {
		fmt.Fprintf(tw, "  %s\t%d\n", o, r.Outcomes[o])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Items == nil {
		return nil
	}
	fmt.Fprintf(w, "\nitems (%d):\n", len(r.Items))
	tw = newTable(w)
	fmt.Fprintln(tw, "  TASK\tOUTCOME\tAT\tDETAIL")
	for _, it := range r.Items {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", it.TaskID, it.Outcome, fmtTime(it.At), oneLine(it.Detail, 160))
	}
	return tw.Flush()
}

func redrivesListCmd(a *app) *cobra.Command {
	var (
		limit  int
		before string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the redrives, newest first, with their status, counts and outcomes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErr("--limit %d: want 1 to 1000", limit)
			}
			j, closeFn, err := a.redriveJobs(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			rs, err := j.list(cmd.Context(), before, limit)
			if err != nil {
				return err
			}
			return a.print(rs, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tSTATUS\tREPLAYED\tFAILED\tSTARTED\tFINISHED\tFILTER")
				for _, r := range rs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.liveness(time.Now()), r.Replayed, r.Failed, fmtTime(r.StartedAt),
						fmtTimePtr(r.FinishedAt), oneLine(compactOrRaw(r.Filter), 100))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many (1 to 1000)")
	cmd.Flags().StringVar(&before, "before", "", "cursor: only redrives started before this one")
	return cmd
}

func redrivesShowCmd(a *app) *cobra.Command {
	var (
		failed   bool
		outcomes []string
	)
	cmd := &cobra.Command{
		Use:   "show ID [--failed] [--outcome O]",
		Short: "Show a redrive: its filter, counts and outcomes; --failed lists the items that did not replay and why",
		Long: `show prints a redrive's record: its filter and patch (masked), snapshot, cursor,
status, counts and its items counted by outcome: replayed, conflict (a live task
holds the idempotency or merge key), unprocessable (the patch did not apply to the
payload), not_open (no longer an open dead letter when its turn came).
--failed lists every item that did not replay, with why; --outcome O lists the
items of these outcomes (repeatable). An unknown redrive exits 3.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, o := range outcomes {
				switch o {
				case backstop.OutcomeReplayed, backstop.OutcomeConflict, backstop.OutcomeUnprocessable, backstop.OutcomeNotOpen:
				default:
					return usageErr("--outcome %q: want replayed, conflict, unprocessable or not_open", o)
				}
			}
			j, closeFn, err := a.redriveJobs(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			r, err := j.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if failed || len(outcomes) > 0 {
				r.Items = []backstop.RedriveItem{}
				after := ""
				for {
					page, err := j.items(cmd.Context(), args[0], outcomes, failed, after, 1000)
					if err != nil {
						return err
					}
					r.Items = append(r.Items, page...)
					if len(page) < 1000 {
						break
					}
					after = page[len(page)-1].TaskID
				}
			}
			return a.print(r, func(w io.Writer) error { return printRedrive(w, r) })
		},
	}
	cmd.Flags().BoolVar(&failed, "failed", false, "list the items that did not replay, and why")
	cmd.Flags().StringArrayVar(&outcomes, "outcome", nil, "list the items of this outcome (repeatable): replayed, conflict, unprocessable, not_open")
	return cmd
}

func redrivesCancelCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a running redrive: whichever process runs it stops after its current batch",
		Long: `cancel marks a running redrive canceled in its record; the process running it
(any: a CLI, a server) stops after its current batch. What was replayed stays
replayed. 'backstop redrives resume ID' continues it. A redrive that is not
running is shown as it is. An unknown redrive exits 3.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, closeFn, err := a.redriveJobs(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			r, err := j.cancel(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(r, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "redrive %s: %s (%d replayed, %d failed)\n", r.ID, r.Status, r.Replayed, r.Failed)
				return err
			})
		},
	}
}

func redrivesResumeCmd(a *app) *cobra.Command {
	var (
		actor, why string
		rate       float64
		limit      int
		force      bool
	)
	cmd := &cobra.Command{
		Use:   "resume ID [--force]",
		Short: "Continue an unfinished redrive from its cursor, with its own filter and patch, from any process",
		Long: `resume continues a redrive that was canceled or whose process stopped (killed,
crashed): from its cursor, with the filter and patch it was started with, each
dead letter replayed once. Progress as for 'dlq redrive'. A finished redrive
exits 4 (conflict); an unknown one exits 3.

A running redrive's process records a heartbeat on it (every
dlq.redrive_heartbeat, default 5s; "redrives show" says when it was last seen).
While its runner was seen less than three heartbeats ago, resume refuses (exit 4,
naming the runner): two processes would run one redrive at once. --force takes
it over anyway (the other runner, if alive, stops after its batch).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usageErr("--limit %d: must not be negative", limit)
			}
			if rate < 0 {
				return usageErr("--rate %v: must not be negative", rate)
			}
			if err := checkReasonFlag("why", why); err != nil {
				return err
			}
			j, closeFn, err := a.redriveJobs(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			report, end := a.jobProgress()
			final, err := j.resume(cmd.Context(), args[0], backstop.RedriveParams{Rate: rate, Limit: limit, Actor: actor, Reason: why, Force: force},
				report)
			end()
			if err != nil {
				return err
			}
			if a.output == "json" {
				return nil
			}
			state := "done"
			if !final.Done {
				state = "paused at --limit (resume again to continue)"
			}
			_, err = fmt.Fprintf(a.stdout, "redrive %s: %d replayed, %d failed, resumed, %s\n", final.RedriveID, final.Replayed, final.Failed, state)
			return err
		},
	}
	cmd.Flags().Float64Var(&rate, "rate", 500, "at most this many replays per second (0: unthrottled)")
	cmd.Flags().IntVar(&limit, "limit", 0, "replay at most this many in this run (0: all)")
	cmd.Flags().BoolVar(&force, "force", false, "take the redrive over even if its runner (another process) was seen recently")
	addActorFlag(cmd, &actor)
	addReasonFlag(cmd, "why", &why)
	return cmd
}
