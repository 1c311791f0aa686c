package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// This file holds the dead-letter operations: replay, redrive, discard,
// resolve, purge, export. Each calls the one library function for it.

// defaultActor is who the history records for a CLI operation: $USER@host.
func defaultActor() string {
	user := os.Getenv("USER")
	host, _ := os.Hostname()
	switch {
	case user != "" && host != "":
		return user + "@" + host
	case user != "":
		return user
	}
	return "cli"
}

func addActorFlag(cmd *cobra.Command, actor *string) {
	cmd.Flags().StringVar(actor, "actor", defaultActor(), "who does this, recorded in the task's history")
}

// dlqFilterFlags are the dead-letter filters of list, redrive and export.
type dlqFilterFlags struct {
	reason, status, errorContains, since, until, where string
	// steps: --workflow, --run, --step, the attributes of workflow steps'
	// tasks (backstop.StepSelection).
	steps backstop.StepSelection
}

func (f *dlqFilterFlags) register(cmd *cobra.Command, withStatus bool) {
	cmd.Flags().StringVar(&f.reason, "reason", "", "only dead letters with this reason: "+joinReasons())
	if withStatus {
		cmd.Flags().StringVar(&f.status, "status", "", "only dead letters with this status (comma-separated): open, replayed, discarded, resolved")
	}
	cmd.Flags().StringVar(&f.errorContains, "error-contains", "", "only dead letters whose last error contains this text")
	cmd.Flags().StringVar(&f.since, "since", "", "only dead letters last seen at or after this time (RFC 3339) or this long ago (24h, 7d)")
	cmd.Flags().StringVar(&f.until, "until", "", "only dead letters last seen at or before this time (RFC 3339) or this long ago")
	registerWhere(cmd, &f.where, "dead letters")
	cmd.Flags().StringVar(&f.steps.Workflow, "workflow", "", "only workflow step tasks of this workflow (attribute workflow)")
	cmd.Flags().StringVar(&f.steps.RunID, "run", "", "only tasks of this run (attribute run_id; several runs: --where 'attributes.run_id in [...]')")
	cmd.Flags().StringVar(&f.steps.Step, "step", "", "only workflow step tasks of this step id (attribute step_id)")
}

func (f *dlqFilterFlags) apply(p *backstop.ListParams, withStatus bool) error {
	p.Reason = bt.DeadReason(f.reason)
	p.ErrorContains = f.errorContains
	var err error
	if p.Where, err = checkWhereFlag(f.where); err != nil {
		return err
	}
	if p.Since, err = parseWhen("since", f.since); err != nil {
		return err
	}
	if p.Until, err = parseWhen("until", f.until); err != nil {
		return err
	}
	if withStatus && f.status != "" {
		for _, s := range strings.Split(f.status, ",") {
			p.DLQStatuses = append(p.DLQStatuses, bt.DLQStatus(strings.TrimSpace(s)))
		}
	}
	if *p, err = f.steps.Apply(*p); err != nil {
		return err
	}
	return nil
}

// parseWhen reads an RFC 3339 time or an age ("24h", "7d": that long ago).
func parseWhen(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := parseAge(s); err == nil {
		return time.Now().UTC().Add(-d), nil
	}
	return parseTime(flag, s)
}

// parseAge reads an age (backstoptype.ParseAge: "30d", "12h", "1d12h").
func parseAge(s string) (time.Duration, error) { return bt.ParseAge(s) }

// patchFlags are the payload-patch and scheduling flags of replay and redrive.
type patchFlags struct {
	patches      []string
	mergeFile    string
	keepAttempts bool
	delay        time.Duration
	runAt        string
}

func (f *patchFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.patches, "patch", nil, "set a payload field: path.to.field=VALUE (VALUE is JSON if valid JSON, else a string; repeatable)")
	cmd.Flags().StringVar(&f.mergeFile, "merge-patch", "", "apply an RFC 7396 JSON merge patch read from FILE (- for stdin), before any --patch")
	cmd.Flags().BoolVar(&f.keepAttempts, "keep-attempts", false, "keep the attempt counter instead of resetting it to 0")
	cmd.Flags().DurationVar(&f.delay, "delay", 0, "run after this delay instead of now")
	cmd.Flags().StringVar(&f.runAt, "run-at", "", "run at this time (RFC 3339) instead of now")
}

func (f *patchFlags) read(a *app) (merge json.RawMessage, ops []backstop.PatchOp, runAt time.Time, err error) {
	for _, s := range f.patches {
		op, err := backstop.ParsePatch(s)
		if err != nil {
			return nil, nil, runAt, err
		}
		ops = append(ops, op)
	}
	if f.mergeFile != "" {
		var b []byte
		if f.mergeFile == "-" {
			b, err = io.ReadAll(a.stdin)
		} else {
			b, err = os.ReadFile(f.mergeFile)
		}
		if err != nil {
			return nil, nil, runAt, usageErr("--merge-patch: %v", err)
		}
		if !json.Valid(b) {
			return nil, nil, runAt, usageErr("--merge-patch %s: not valid JSON", f.mergeFile)
		}
		merge = b
	}
	if f.runAt != "" {
		if f.delay != 0 {
			return nil, nil, runAt, usageErr("give --delay or --run-at, not both")
		}
		if runAt, err = parseTime("run-at", f.runAt); err != nil {
			return nil, nil, runAt, err
		}
	}
	return merge, ops, runAt, nil
}

const replayLong = `Replay a dead letter: in one transaction it goes back to its queue under the
SAME id, with its attempts reset to 0 (--keep-attempts keeps them), to run now
(or after --delay / at --run-at); the lease and last error are cleared; payload,
attributes, progress, complexity and the execution history are kept, replay_count
grows by one, and the history records the replay and its --actor.

--patch path=VALUE sets a payload field (dotted path; VALUE is JSON when it is
valid JSON, else a string); --merge-patch FILE applies an RFC 7396 merge patch
first. A patch that does not apply (a path through a scalar, invalid JSON, a
payload over the size limit) is refused: exit 2, nothing changes.

--new-id copies the dead letter under a fresh id that records replayed_from;
the original stays in the DLQ marked replayed.

Idempotent: an id that is no longer an open dead letter (live again, finished,
replayed with --new-id) prints replayed: false and exits 0. A discarded or
resolved dead letter is not replayed either, but that is a conflict with its
status: exit 4, naming the status and --reopen. --reopen also replays a
discarded or resolved dead letter (undoing a discard or a resolve made by
mistake); the history records the actor and the status it came from
(from_status in dlq.replayed). Over --server it needs an admin token.
Two concurrent replays of one id move it exactly once. Unknown id: exit 3.

Conflict (exit 4): a task id is one row for its whole life, so no live task can
share the dead letter's id. A replay conflicts when the replayed task would break
a uniqueness rule: a live task now holds its idempotency key, or a waiting task
of the same kind holds its merge key (or, with --new-id, the new id exists).
The dead letter is left as it was.`

func dlqReplayCmd(a *app) *cobra.Command {
	var (
		pf     patchFlags
		actor  string
		reason string
		newID  bool
		reopen bool
		hold   bool
	)
	cmd := &cobra.Command{
		Use:   "replay ID",
		Short: "Replay a dead letter under its own id, optionally patched",
		Long:  replayLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkReasonFlag("reason", reason); err != nil {
				return err
			}
			if !hold {
				return usageErr("--hold-key=false: a replay on an ordered queue always holds its key's later tasks until it settles (docs/ordering.md); there is no way to let them overtake it")
			}
			merge, ops, runAt, err := pf.read(a)
			if err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.Replay(cmd.Context(), backstop.ReplayParams{ID: args[0], Actor: actor, Reason: reason, MergePatch: merge,
				Patch: ops, KeepAttempts: pf.keepAttempts, Delay: pf.delay, RunAt: runAt, NewID: newID, Reopen: reopen})
			if err != nil {
				return err
			}
			if !res.Replayed && !reopen && (res.DLQStatus == bt.DLQDiscarded || res.DLQStatus == bt.DLQResolved) {
				// Closed by an operator: not a no-op to shrug at, a conflict
				// with its status, and --reopen is the way out.
				if a.output == "json" {
					if err := a.printJSON(res); err != nil {
						return err
					}
				}
				return &exitError{code: ExitConflict, err: fmt.Errorf("dead letter %s is %s, not open: not replayed; --reopen replays it anyway (recording that it was %s)",
					res.ID, res.DLQStatus, res.DLQStatus)}
			}
			return a.print(res, func(w io.Writer) error {
				switch {
				case !res.Replayed:
					_, err = fmt.Fprintf(w, "%s\tnot replayed: it is %s%s, not an open dead letter (replayed: false)\n",
						res.ID, res.State, statusSuffix(res.DLQStatus))
				case res.NewID != "":
					_, err = fmt.Fprintf(w, "%s\treplayed as %s (%s)\n", res.ID, res.NewID, res.Task.State)
				default:
					_, err = fmt.Fprintf(w, "%s\treplayed (%s, replay %d)\n", res.ID, res.Task.State, res.Task.ReplayCount)
				}
				return err
			})
		},
	}
	pf.register(cmd)
	addActorFlag(cmd, &actor)
	addReasonFlag(cmd, "reason", &reason)
	cmd.Flags().BoolVar(&newID, "new-id", false, "replay a copy under a fresh id (replayed_from = ID); the original is marked replayed")
	cmd.Flags().BoolVar(&reopen, "reopen", false, "also replay a discarded or resolved dead letter (recorded with the status it came from)")
	cmd.Flags().BoolVar(&hold, "hold-key", true, "on an ordered queue, hold the key's later tasks until the replay settles (always so: the flag states it; false is refused)")
	return cmd
}

func statusSuffix(s bt.DLQStatus) string {
	if s == "" {
		return ""
	}
	return " (" + string(s) + ")"
}

// redriveSelectionFlags are the flags of dlq redrive that select dead
// letters; without one it needs --all.
var redriveSelectionFlags = []string{"queue", "kind", "attr", "reason", "error-contains", "since", "until", "where", "workflow", "run", "step"}

func dlqRedriveCmd(a *app) *cobra.Command {
	var (
		f     listFlags
		df    dlqFilterFlags
		pf    patchFlags
		actor string
		why   string
		rate  float64

		dryRun, yes bool
		all         bool
		hold        bool
		confirmOver int
		sample      int
	)
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Replay every matching dead letter, at a bounded rate; resumable",
		Long: `Replay every open dead letter matching the filters, as 'dlq replay' would, at most
--rate per second (0: unthrottled), in batches of up to 500 per transaction. A
progress bar goes to stderr on a terminal; with -o json, one JSON progress line
per batch goes to stdout. Ctrl-C stops cleanly between batches.

The redrive is recorded with its filter and a snapshot time. Running the same
command again after an interruption or a crash resumes it: only dead letters
last seen at or before the snapshot are replayed, each once, so a task that
died again after being redriven is not redriven twice. --limit N replays at
most N in this run; running again continues.

--why TEXT is the operator's reason, recorded with --actor in each replay's
history and on the redrive's record (here --reason filters the dead letters
by their own reason, as in 'dlq list').

--dry-run changes nothing (no redrive record, no event): it prints how many
open dead letters match now and a sample of --sample of them (id, queue, kind,
reason, error); with --patch or --merge-patch, each sampled payload before and
after the patch (masked, as payloads are shown) with the changed places as
RFC 6902 operations (add, remove, replace) on JSON pointers, or why the patch
does not apply to it.

A redrive that selects nothing needs --all (every open dead letter); --all
takes no selection.

A redrive that would replay more than --confirm-over dead letters (default
100) asks for confirmation when stdin is a terminal; --yes skips the question.
Without a terminal and without --yes it exits 2 and replays nothing.

Workflows: --workflow W, --run RUN_ID and --step STEP_ID select workflow
steps' dead tasks by the attributes each step's task carries (workflow,
run_id, step_id). A run halted at a dead step (on_failure halt) resumes when
that step is replayed, so 'dlq redrive --workflow W --step S' resumes every
run of W halted at S with one command. They are checked first (exit 2,
nothing replayed): W must be a registered workflow, S a step of one of W's
versions (or of the run's), and RUN_ID, if a workflow run, a run of W.
'runs list --workflow W --state failed' lists the halted runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.limit < 0 {
				return usageErr("--limit %d: must not be negative", f.limit)
			}
			if err := checkReasonFlag("why", why); err != nil {
				return err
			}
			if !hold {
				return usageErr("--hold-key=false: a replay on an ordered queue always holds its key's later tasks until it settles (docs/ordering.md); there is no way to let them overtake it")
			}
			if df.reason != "" && !slices.Contains(bt.DeadReasons, bt.DeadReason(df.reason)) {
				return usageErr("--reason %q is not a dead-letter reason (%s): on redrive --reason filters the dead letters; "+
					"give your reason for the redrive with --why", df.reason, joinReasons())
			}
			attrs, err := parseAttrs(f.attrs)
			if err != nil {
				return err
			}
			lp := backstop.ListParams{Queue: f.queue, Kind: f.kind, Attrs: attrs}
			if err := df.apply(&lp, false); err != nil {
				return err
			}
			merge, ops, runAt, err := pf.read(a)
			if err != nil {
				return err
			}
			if confirmOver < 0 {
				return usageErr("--confirm-over %d: must not be negative", confirmOver)
			}
			if sample < 0 || sample > 100 {
				return usageErr("--sample %d: must be between 0 and 100", sample)
			}
			if err := needAll("dlq redrive", "", all, changed(cmd, redriveSelectionFlags), redriveSelectionFlags); err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			params := backstop.RedriveParams{Filter: lp, Steps: df.steps, Rate: rate, Limit: f.limit, All: all,
				MergePatch: merge, Patch: ops, KeepAttempts: pf.keepAttempts, Delay: pf.delay, RunAt: runAt, Actor: actor, Reason: why}
			if dryRun {
				dp := params
				dp.DryRun, dp.SampleSize = true, sample
				if sample == 0 {
					dp.SampleSize = -1
				}
				pre, err := c.Redrive(cmd.Context(), dp, func(backstop.RedriveProgress) {})
				if err != nil {
					return err
				}
				return a.print(pre, func(w io.Writer) error { return printRedrivePreview(w, pre) })
			}
			if !yes {
				dp := params
				dp.DryRun, dp.SampleSize = true, -1
				pre, err := c.Redrive(cmd.Context(), dp, func(backstop.RedriveProgress) {})
				if err != nil {
					return err
				}
				if err := a.confirmMany("dlq redrive", "redrive", "replayed", pre.Total, confirmOver); err != nil { // terminal.go
					return err
				}
			}
			report, end := a.jobProgress()
			final, err := c.Redrive(cmd.Context(), params, report)
			end()
			if err != nil {
				return err
			}
			if a.output == "json" {
				return nil
			}
			if final.Empty {
				_, err = fmt.Fprintf(a.stdout, "redrive %s: nothing matched: no open dead letter matches the selection; nothing was replayed (recorded as empty)\n", final.RedriveID)
				return err
			}
			state := "done"
			if !final.Done {
				state = "paused at --limit (run again to continue)"
			}
			resumed := ""
			if final.Resumed {
				resumed = ", resumed"
			}
			_, err = fmt.Fprintf(a.stdout, "redrive %s: %d replayed, %d failed%s, %s\n", final.RedriveID, final.Replayed, final.Failed, resumed, state)
			return err
		},
	}
	cmd.Flags().StringVar(&f.queue, "queue", "", "only dead letters of this queue")
	cmd.Flags().StringVar(&f.kind, "kind", "", "only dead letters of this kind")
	cmd.Flags().StringArrayVar(&f.attrs, "attr", nil, "only dead letters with this attribute, key=value (repeatable)")
	cmd.Flags().IntVar(&f.limit, "limit", 0, "replay at most this many in this run (0: all)")
	cmd.Flags().Float64Var(&rate, "rate", 500, "at most this many replays per second (0: unthrottled)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count and show a sample of what would be replayed (with a patch: its diffs); change nothing")
	cmd.Flags().IntVar(&sample, "sample", backstop.DefaultRedriveSample, "with --dry-run: show this many of the matching dead letters (0 to 100)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation, however many match")
	cmd.Flags().BoolVar(&all, "all", false, "without a selection: every open dead letter (a redrive that selects nothing needs it)")
	cmd.Flags().IntVar(&confirmOver, "confirm-over", 100, "ask for confirmation (or need --yes) when more than this many match")
	cmd.Flags().BoolVar(&hold, "hold-key", true, "on an ordered queue, hold each key's later tasks until its replay settles (always so: the flag states it; false is refused)")
	df.register(cmd, false)
	pf.register(cmd)
	addActorFlag(cmd, &actor)
	addReasonFlag(cmd, "why", &why)
	return cmd
}

// printRedrivePreview prints a dry run: the count, the sample, the diffs.
func printRedrivePreview(w io.Writer, p backstop.RedriveProgress) error {
	pv := p.Preview
	if pv == nil {
		pv = &backstop.RedrivePreview{Matched: p.Total}
	}
	rows := make([]sampleRow, len(pv.Sample))
	for i, s := range pv.Sample {
		rows[i] = sampleRow{s.ID, s.Queue, s.Kind, s.Reason, s.Error}
	}
	if err := printDryRun(w, "redrive", pv.Matched, rows); err != nil {
		return err
	}
	for _, s := range pv.Sample {
		d := s.Diff
		if d == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", s.ID)
		if d.Error != "" {
			fmt.Fprintf(w, "  patch does not apply: %s\n", d.Error)
			continue
		}
		for _, ch := range d.Changes {
			fmt.Fprintf(w, "  %s %s\n", ch.Op, ch.Path)
		}
		if len(d.Changes) == 0 {
			fmt.Fprintln(w, "  (no change)")
		}
		fmt.Fprintf(w, "  before: %s\n  after:  %s\n", compactOrRaw(d.Before), compactOrRaw(d.After))
	}
	return nil
}

func compactOrRaw(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		return buf.String()
	}
	return string(b)
}

// progressBar draws redrive progress on stderr when it is a terminal; a
// zero progress ends the line.
// jobProgress reports a bulk job's progress (a redrive, a task action): a
// JSON line each with -o json, else the progress bar; end ends the bar's
// line.
func (a *app) jobProgress() (report func(backstop.RedriveProgress), end func()) {
	bar := a.progressBar()
	return func(p backstop.RedriveProgress) {
		if a.output == "json" {
			_ = json.NewEncoder(a.stdout).Encode(p)
			return
		}
		bar(p)
	}, func() { bar(backstop.RedriveProgress{}) }
}

func (a *app) progressBar() func(backstop.RedriveProgress) {
	f, ok := a.stderr.(*os.File)
	if !ok || a.output == "json" {
		return func(backstop.RedriveProgress) {}
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func(backstop.RedriveProgress) {}
	}
	drawn := false
	return func(p backstop.RedriveProgress) {
		if p.RedriveID == "" {
			if drawn {
				fmt.Fprintln(f)
			}
			return
		}
		drawn = true
		done := p.Replayed + p.Failed
		frac := 1.0
		if p.Total > 0 {
			frac = min(1, float64(done)/float64(p.Total))
		}
		const width = 30
		n := int(frac * width)
		did, not := "replayed", "failed"
		if p.Kind != "" && p.Kind != "redrive" { // a task action's job
			did, not = "changed", "skipped"
		}
		fmt.Fprintf(f, "\r[%s%s] %d/%d %s %d %s %d  %.0f/s ", strings.Repeat("#", n), strings.Repeat(".", width-n),
			done, p.Total, did, p.Replayed, not, p.Failed, p.Rate)
	}
}

// bulkCloseLong is the part of discard's and resolve's help on closing by
// filter.
const bulkCloseLong = `

Without an ID, %[1]s every OPEN dead letter a selection matches: --queue, --kind,
--attr k=v (repeatable), --dead-reason (the dead letters' own reason: here
--reason is yours), --error-contains, --since, --until, --where EXPR. Only dead
letters that died before the command started are taken. It goes in batches of
500, each dead letter with its own history event (actor and reason) as one by
one, printing progress (with -o json, one JSON line per batch, the last with
done: true). Interrupted, it can be run again: the %[2]s ones no longer match.

--dry-run prints how many match and a sample of --sample of them, and changes
nothing. More than --confirm-over (default 100) asks for confirmation on a
terminal; --yes skips the question; without a terminal and without --yes it
exits 2 and changes nothing.

An ID with a selection flag is refused (exit 2), and so is neither: to %[3]s every
open dead letter of every queue, say --all (alone).`

func dlqDiscardCmd(a *app) *cobra.Command {
	var (
		reason, actor string
		bf            bulkCloseFlags
	)
	cmd := &cobra.Command{
		Use:   "discard [ID] --reason TEXT",
		Short: "Discard a dead letter, or all a filter matches, on purpose (the record is kept)",
		Long: "Mark an open dead letter discarded, keeping the record with its status, reason, actor and time.\n" +
			"--reason is required (exit 2 without). An id that is not an open dead letter exits 3." +
			fmt.Sprintf(bulkCloseLong, "discard", "discarded", "discard"),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bulk, err := bf.bulk(cmd, "dlq discard", args) // dlq_bulk.go
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return usageErr("dlq discard: --reason is required")
			}
			if err := checkReasonFlag("reason", reason); err != nil {
				return err
			}
			if bulk {
				return a.closeMatching(cmd, "dlq discard", &bf, bt.DLQDiscarded, reason, "", actor)
			}
			return a.setDLQStatus(cmd, func(c backend) (*backstop.Task, error) {
				return c.Discard(cmd.Context(), backstop.DiscardParams{ID: args[0], Reason: reason, Actor: actor})
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is discarded (required)")
	addActorFlag(cmd, &actor)
	bf.register(cmd)
	return cmd
}

func dlqResolveCmd(a *app) *cobra.Command {
	var (
		note, reason, actor string
		bf                  bulkCloseFlags
	)
	cmd := &cobra.Command{
		Use:   "resolve [ID] [--reason TEXT] [--note TEXT]",
		Short: "Mark a dead letter, or all a filter matches, resolved (handled by hand; the record is kept)",
		Long: "Mark an open dead letter resolved, keeping the record with its status, reason, note, actor and time.\n" +
			"--reason says why (as on every operator action); --note, the older flag, says how it was handled\n" +
			"and, without --reason, is recorded as the reason too. An id that is not an open dead letter exits 3." +
			fmt.Sprintf(bulkCloseLong, "resolve", "resolved", "resolve"),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bulk, err := bf.bulk(cmd, "dlq resolve", args) // dlq_bulk.go
			if err != nil {
				return err
			}
			if err := checkReasonFlag("reason", reason); err != nil {
				return err
			}
			if bulk {
				return a.closeMatching(cmd, "dlq resolve", &bf, bt.DLQResolved, reason, note, actor)
			}
			return a.setDLQStatus(cmd, func(c backend) (*backstop.Task, error) {
				return c.Resolve(cmd.Context(), backstop.ResolveParams{ID: args[0], Note: note, Reason: reason, Actor: actor})
			})
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "how it was handled (without --reason, also recorded as the reason)")
	addReasonFlag(cmd, "reason", &reason)
	addActorFlag(cmd, &actor)
	bf.register(cmd)
	return cmd
}

func (a *app) setDLQStatus(cmd *cobra.Command, op func(backend) (*backstop.Task, error)) error {
	c, err := a.backend(cmd.Context(), nil)
	if err != nil {
		return err
	}
	defer c.Close()
	t, err := op(c)
	if err != nil {
		return err
	}
	return a.print(newDeadLetterJSON(t, false), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s\t%s\n", t.ID, t.DLQStatus)
		return err
	})
}

// purgeJSON is what dlq purge prints.
type purgeJSON struct {
	Purged     int  `json:"purged"`
	WouldPurge int  `json:"would_purge,omitempty"`
	DryRun     bool `json:"dry_run,omitempty"`
}

func dlqPurgeCmd(a *app) *cobra.Command {
	var (
		olderThan, status, reason, actor, where string
		dryRun, yes, belowFloor                 bool
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than AGE [--dry-run] [--yes]",
		Short: "Delete dead-letter records for good (default: discarded and resolved ones)",
		Long: `Delete dead letters whose status is one of --status (default discarded,resolved) and whose record
last changed more than --older-than ago (30d, 12h, 90m), with their executions, spilled payloads
and history. Archive first with 'dlq export'. Prints how many were deleted.

--dry-run counts what would be deleted and deletes nothing. When stdin is a terminal, purge
says how many records match and asks before deleting them (--yes skips the question); when
stdin is not a terminal (a script, cron, a pipe) it deletes without asking, as scripts expect.

Open dead letters wait for an operator and are never purged unless --status names open;
then the deletion needs a confirmation: the terminal's question, or --yes. Without a
terminal and without --yes it exits 2 and deletes nothing.

--where EXPR purges only the records whose payload and attributes match the CEL
condition (as 'dlq list --where'); an invalid one exits 2 and deletes nothing.

dlq.purge_floor (default 7d; BACKSTOP_DLQ_PURGE_FLOOR here, the server's own
configuration with --server) is the age below which no purge deletes a record: an
--older-than below it is refused (exit 2 naming both) unless --below-floor, which
the purge's dlq.purged event records.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan == "" {
				return usageErr("dlq purge: --older-than is required (e.g. 30d)")
			}
			if err := checkReasonFlag("reason", reason); err != nil {
				return err
			}
			age, err := parseAge(olderThan)
			if err != nil {
				return usageErr("--older-than %q: want a duration such as 30d, 12h or 90m", olderThan)
			}
			if where, err = checkWhereFlag(where); err != nil {
				return err
			}
			var sts []bt.DLQStatus
			for _, s := range strings.Split(status, ",") {
				if s = strings.TrimSpace(s); s != "" {
					sts = append(sts, bt.DLQStatus(s))
				}
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			p := backstop.PurgeParams{OlderThan: age, Statuses: sts, Reason: reason, Actor: actor, Where: where, BelowFloor: belowFloor}
			withOpen := slices.Contains(sts, bt.DLQOpen)
			tty := isTerminal(a.stdin)
			if withOpen && !dryRun && !yes && !tty {
				return usageErr("dlq purge --status open: open dead letters wait for an operator; deleting them needs " +
					"a confirmation and there is no terminal to ask on: pass --yes")
			}
			p.ConfirmOpen = withOpen && yes
			if dryRun || (!yes && tty) {
				p.DryRun = true
				n, err := c.PurgeDLQ(cmd.Context(), p)
				if err != nil {
					return err
				}
				if dryRun {
					return a.print(purgeJSON{WouldPurge: n, DryRun: true}, func(w io.Writer) error {
						_, err := fmt.Fprintf(w, "would purge %d dead letters (dry run: nothing deleted)\n", n)
						return err
					})
				}
				matching := ""
				if where != "" {
					matching = ", matching " + where
				}
				if n > 0 && !a.confirm(fmt.Sprintf("Delete %d dead letters (status %s, last changed more than %s ago%s) for good?", n, status, olderThan, matching)) {
					return &exitError{code: ExitFailure, err: errors.New("dlq purge: not confirmed; nothing deleted")}
				}
				p.DryRun, p.ConfirmOpen = false, withOpen
			}
			n, err := c.PurgeDLQ(cmd.Context(), p)
			if err != nil {
				return err
			}
			return a.print(purgeJSON{Purged: n}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "purged %d dead letters\n", n)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation on a terminal")
	cmd.Flags().StringVar(&olderThan, "older-than", "", "only records last changed longer ago than this (30d, 12h)")
	cmd.Flags().StringVar(&status, "status", "discarded,resolved", "statuses to purge (comma-separated): open, replayed, discarded, resolved")
	cmd.Flags().BoolVar(&belowFloor, "below-floor", false, "allow an --older-than below dlq.purge_floor (recorded)")
	registerWhere(cmd, &where, "records")
	addReasonFlag(cmd, "reason", &reason)
	addActorFlag(cmd, &actor)
	return cmd
}

// confirm asks a yes/no question on stderr and reads the answer from
// stdin; anything but y or yes is no.
func (a *app) confirm(question string) bool {
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

func dlqExportCmd(a *app) *cobra.Command {
	var (
		f     listFlags
		df    dlqFilterFlags
		out   string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "export [--out FILE]",
		Short: "Export dead letters as NDJSON, one per line with executions and history",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			attrs, err := parseAttrs(f.attrs)
			if err != nil {
				return err
			}
			if f.limit < 0 {
				return usageErr("--limit %d: must not be negative", f.limit)
			}
			lp := backstop.ListParams{Queue: f.queue, Kind: f.kind, Attrs: attrs, AfterID: f.after, Limit: f.limit}
			if err := df.apply(&lp, true); err != nil {
				return err
			}
			c, err := a.backend(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer c.Close()
			w := a.stdout
			var file *os.File
			if out != "" && out != "-" {
				// An existing file is an earlier export, perhaps the only
				// copy of records since purged: never truncate it unasked.
				mode := os.O_WRONLY | os.O_CREATE | os.O_EXCL
				if force {
					mode = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
				}
				if file, err = os.OpenFile(out, mode, 0o644); err != nil {
					if errors.Is(err, os.ErrExist) {
						return usageErr("--out %s: the file exists; pass --force to overwrite it", out)
					}
					return usageErr("--out: %v", err)
				}
				defer file.Close()
				w = file
			}
			n, err := a.exportTo(cmd, c, lp, w, file)
			if err != nil {
				if file != nil {
					// A partial export is no export: remove it, so a retry
					// is not refused for the file it left behind.
					file.Close()
					os.Remove(out)
				}
				return err
			}
			if file != nil {
				fmt.Fprintf(a.stderr, "exported %d dead letters to %s\n", n, out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.queue, "queue", "", "only dead letters of this queue")
	cmd.Flags().StringVar(&f.kind, "kind", "", "only dead letters of this kind")
	cmd.Flags().StringArrayVar(&f.attrs, "attr", nil, "only dead letters with this attribute, key=value (repeatable)")
	cmd.Flags().IntVar(&f.limit, "limit", 0, "at most this many (0: all)")
	cmd.Flags().StringVar(&f.after, "after", "", "cursor: only ids after this one")
	cmd.Flags().StringVar(&out, "out", "", "write to FILE instead of stdout (refused if FILE exists, unless --force)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite the --out file if it exists")
	df.register(cmd, true)
	addRawFlag(a, cmd)
	return cmd
}

// exportTo writes the export as NDJSON to w, then closes file (when not
// stdout) so a write error is reported.
func (a *app) exportTo(cmd *cobra.Command, c backend, lp backstop.ListParams, w io.Writer, file *os.File) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	n, err := c.ExportDLQ(cmd.Context(), lp, func(d backstop.DeadLetterExport) error { return enc.Encode(d) })
	if err != nil {
		return n, err
	}
	if err := bw.Flush(); err != nil {
		return n, err
	}
	if file != nil {
		return n, file.Close()
	}
	return n, nil
}

// printEvents prints a task's history after its executions.
func printEvents(w io.Writer, events []bt.Event) error {
	fmt.Fprintf(w, "\nhistory (%d):\n", len(events))
	if len(events) == 0 {
		_, err := fmt.Fprintln(w, "  no events")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "  TIME\tTYPE\tACTOR\tBODY")
	for _, e := range events {
		body := e.Body
		var b bytes.Buffer
		if json.Compact(&b, body) == nil { // the same text whichever driver stored it
			body = b.Bytes()
		}
		text := oneLine(string(body), 120)
		if r := operatorReason(e); r != "" { // the reason first, so the cut never hides it
			text = "reason: " + oneLine(r, 200) + " | " + text
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", fmtTime(e.Time), e.Type, e.Actor, text)
	}
	return tw.Flush()
}
