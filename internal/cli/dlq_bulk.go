package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// This file holds `dlq discard` and `dlq resolve` by filter (no ID: every
// open dead letter a selection matches, in batches) and the purge floor
// the commands on the database run with.

// purgeFloor is dlq.purge_floor for the commands that work on the
// database (envSettings), default 7 days.
func purgeFloor() (time.Duration, error) {
	c, err := envSettings("DLQ_PURGE_FLOOR")
	if err != nil {
		return 0, err
	}
	return c.Effective().DLQ.PurgeFloor.D(), nil
}

// whereBudget is limits.where_cost and limits.where_time for the commands
// on the database (envSettings).
func whereBudget() (uint64, time.Duration, error) {
	c, err := envSettings("LIMITS_WHERE_COST", "LIMITS_WHERE_TIME")
	if err != nil {
		return 0, 0, err
	}
	l := c.Library()
	return l.WhereCost, l.WhereTime, nil
}

// closeBatch is how many dead letters one CloseMatching call closes.
const closeBatch = 500

// bulkCloseFlags select the dead letters a discard or resolve without an
// ID closes. --reason is the operator's on these commands, so the dead
// letters' own reason is --dead-reason.
type bulkCloseFlags struct {
	queue, kind, deadReason, errorContains, since, until, where string
	attrs                                                       []string
	all, dryRun, yes                                            bool
	confirmOver, sample                                         int
}

// selectionFlags are the flags that select dead letters.
var selectionFlags = []string{"queue", "kind", "attr", "dead-reason", "error-contains", "since", "until", "where"}

// bulkOnlyFlags mean something only without an ID.
var bulkOnlyFlags = []string{"all", "dry-run", "yes", "confirm-over", "sample"}

func (f *bulkCloseFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.queue, "queue", "", "without ID: only dead letters of this queue")
	cmd.Flags().StringVar(&f.kind, "kind", "", "without ID: only dead letters of this kind")
	cmd.Flags().StringArrayVar(&f.attrs, "attr", nil, "without ID: only dead letters with this attribute, key=value (repeatable)")
	cmd.Flags().StringVar(&f.deadReason, "dead-reason", "", "without ID: only dead letters that died for this reason: "+joinReasons())
	cmd.Flags().StringVar(&f.errorContains, "error-contains", "", "without ID: only dead letters whose last error contains this text")
	cmd.Flags().StringVar(&f.since, "since", "", "without ID: only dead letters last seen at or after this time (RFC 3339) or this long ago (24h, 7d)")
	cmd.Flags().StringVar(&f.until, "until", "", "without ID: only dead letters last seen at or before this time (RFC 3339) or this long ago")
	registerWhere(cmd, &f.where, "dead letters (without ID)")
	cmd.Flags().BoolVar(&f.all, "all", false, "without ID and without a selection: every open dead letter")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "without ID: count and show a sample of the matching dead letters; change nothing")
	cmd.Flags().IntVar(&f.sample, "sample", backstop.DefaultRedriveSample, "with --dry-run: show this many of the matching dead letters (0 to 100)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "without ID: do not ask for confirmation, however many match")
	cmd.Flags().IntVar(&f.confirmOver, "confirm-over", 100, "without ID: ask for confirmation (or need --yes) when more than this many match")
}

func changed(cmd *cobra.Command, names []string) []string {
	var out []string
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			out = append(out, "--"+n)
		}
	}
	return out
}

// bulk says whether the command closes by filter (no ID), refusing an ID
// with selection flags and a bare command (which would mean everything
// without saying so).
func (f *bulkCloseFlags) bulk(cmd *cobra.Command, name string, args []string) (bool, error) {
	sel, only := changed(cmd, selectionFlags), changed(cmd, bulkOnlyFlags)
	switch {
	case len(args) == 1 && len(sel)+len(only) > 0:
		return false, usageErr("%s: give an ID or a selection of dead letters, not both (%s select by filter)", name, strings.Join(append(sel, only...), ", "))
	case len(args) == 1:
		return false, nil
	}
	return true, needAll(name, "give an ID, or ", f.all, sel, selectionFlags)
}

// needAll is the CLI's side of the bulk rule (backstop's checkAll): a bulk
// action without a selection needs --all, and --all takes no selection.
// sel are the selection flags given, selection all of them; orID is what
// else the command takes ("give an ID, or ").
func needAll(name, orID string, all bool, sel, selection []string) error {
	switch {
	case all && len(sel) > 0:
		return usageErr("%s: --all selects every open dead letter; it cannot be narrowed by %s (drop --all)", name, strings.Join(sel, ", "))
	case !all && len(sel) == 0:
		return usageErr("%s: %sselect dead letters with %s; --all, alone, selects every open dead letter",
			name, orID, strings.Join(prefixed(selection), ", "))
	}
	return nil
}

func prefixed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "--" + n
	}
	return out
}

// filter reads the selection into a listing filter of open dead letters.
func (f *bulkCloseFlags) filter() (backstop.ListParams, error) {
	var lp backstop.ListParams
	if f.deadReason != "" && !slices.Contains(bt.DeadReasons, bt.DeadReason(f.deadReason)) {
		return lp, usageErr("--dead-reason %q is not a dead-letter reason (%s)", f.deadReason, joinReasons())
	}
	if f.confirmOver < 0 {
		return lp, usageErr("--confirm-over %d: must not be negative", f.confirmOver)
	}
	if f.sample < 0 || f.sample > 100 {
		return lp, usageErr("--sample %d: must be between 0 and 100", f.sample)
	}
	attrs, err := parseAttrs(f.attrs)
	if err != nil {
		return lp, err
	}
	df := dlqFilterFlags{reason: f.deadReason, errorContains: f.errorContains, since: f.since, until: f.until, where: f.where}
	lp = backstop.ListParams{Queue: f.queue, Kind: f.kind, Attrs: attrs}
	return lp, df.apply(&lp, false)
}

// closeProgressJSON is one line of a bulk close's JSON output: one per
// batch, the last with done true.
type closeProgressJSON struct {
	Status  bt.DLQStatus `json:"status"`
	Matched int          `json:"matched"`
	Closed  int          `json:"closed"`
	Skipped int          `json:"skipped"`
	Done    bool         `json:"done"`
}

// closePreviewJSON is a bulk close's dry run.
type closePreviewJSON struct {
	DryRun  bool               `json:"dry_run"`
	Status  bt.DLQStatus       `json:"status"`
	Matched int                `json:"matched"`
	Sample  []closeSampleEntry `json:"sample"`
}

type closeSampleEntry struct {
	ID     string        `json:"id"`
	Queue  string        `json:"queue"`
	Kind   string        `json:"kind"`
	Reason bt.DeadReason `json:"reason"`
	Error  string        `json:"error"`
}

// closeMatching discards or resolves (st) every open dead letter the
// selection matches that died by now, a batch at a time, after a count
// (the dry run's answer, and the confirmation's question).
func (a *app) closeMatching(cmd *cobra.Command, name string, f *bulkCloseFlags, st bt.DLQStatus, reason, note, actor string) error {
	lp, err := f.filter()
	if err != nil {
		return err
	}
	if st == bt.DLQResolved && a.server == "" && strings.TrimSpace(reason) == "" && strings.TrimSpace(note) == "" {
		// Refused before the count and the question, not after them.
		if req, err := requireReason(); err != nil {
			return err
		} else if req {
			return usageErr("%s: reason: is required (dlq.require_reason): pass --reason or --note", name)
		}
	}
	c, err := a.backend(cmd.Context(), nil)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cmd.Context()
	snapshot := time.Now().UTC()
	sampleSize := 0
	if f.dryRun {
		sampleSize = f.sample
	}
	matched, sample, err := countOpen(ctx, c, lp, snapshot, sampleSize)
	if err != nil {
		return err
	}
	verb := map[bt.DLQStatus]string{bt.DLQDiscarded: "discard", bt.DLQResolved: "resolve"}[st]
	if f.dryRun {
		pv := closePreviewJSON{DryRun: true, Status: st, Matched: matched, Sample: sample}
		return a.print(pv, func(w io.Writer) error { return printClosePreview(w, verb, pv) })
	}
	if !f.yes {
		if err := a.confirmMany(name, verb, string(st), matched, f.confirmOver); err != nil { // terminal.go
			return err
		}
	}
	p := backstop.CloseMatchingParams{Filter: lp, Status: st, Reason: reason, Note: note, Actor: actor, Snapshot: snapshot, Limit: closeBatch,
		All: f.all}
	out := closeProgressJSON{Status: st, Matched: matched}
	report := func() {
		if a.output == "json" {
			_ = json.NewEncoder(a.stdout).Encode(out)
			return
		}
		fmt.Fprintf(a.stderr, "%s %d of %d\n", st, out.Closed, matched)
	}
	for {
		res, err := c.CloseMatching(ctx, p)
		out.Closed += res.Closed
		out.Skipped += res.Skipped
		if err != nil {
			if out.Closed > 0 || errors.Is(err, context.Canceled) {
				return fmt.Errorf("%d %s, then: %w (run the command again to go on)", out.Closed, st, err)
			}
			return err
		}
		out.Done = !res.More || res.Closed+res.Skipped == 0
		report()
		if out.Done {
			break
		}
	}
	if a.output == "json" {
		return nil
	}
	skipped := ""
	if out.Skipped > 0 {
		skipped = fmt.Sprintf(" (%d changed by someone else first)", out.Skipped)
	}
	_, err = fmt.Fprintf(a.stdout, "%s %d dead letters%s\n", st, out.Closed, skipped)
	return err
}

// countOpen counts the open dead letters lp matches that died by snapshot
// (the pages of a listing, without payloads), keeping the first sample.
func countOpen(ctx context.Context, c backend, lp backstop.ListParams, snapshot time.Time, sample int) (int, []closeSampleEntry, error) {
	f := lp
	f.DLQStatuses, f.WithoutPayload, f.Limit = []bt.DLQStatus{bt.DLQOpen}, true, closeBatch
	if f.Until.IsZero() || f.Until.After(snapshot) {
		f.Until = snapshot
	}
	n, out := 0, []closeSampleEntry{}
	for {
		page, err := c.DeadLetters(ctx, f)
		if err != nil {
			return n, out, err
		}
		for _, t := range page {
			if len(out) < sample {
				out = append(out, closeSampleEntry{ID: t.ID, Queue: t.Queue, Kind: t.Kind, Reason: t.DeadReason, Error: t.LastError})
			}
		}
		n += len(page)
		if len(page) < f.Limit {
			return n, out, nil
		}
		f.AfterID = page[len(page)-1].ID
	}
}

func printClosePreview(w io.Writer, verb string, pv closePreviewJSON) error {
	rows := make([]sampleRow, len(pv.Sample))
	for i, s := range pv.Sample {
		rows[i] = sampleRow{s.ID, s.Queue, s.Kind, s.Reason, s.Error}
	}
	return printDryRun(w, verb, pv.Matched, rows)
}

// sampleRow is one dead letter of a dry run's sample.
type sampleRow struct {
	id, queue, kind string
	reason          bt.DeadReason
	err             string
}

// printDryRun prints a bulk action's dry run on dead letters: how many
// would be acted on, and its sample as a table.
func printDryRun(w io.Writer, verb string, matched int, sample []sampleRow) error {
	rows := make([][]string, len(sample))
	for i, s := range sample {
		rows[i] = []string{s.id, s.queue, s.kind, string(s.reason), oneLine(s.err, 80)}
	}
	return printSample(w, fmt.Sprintf("would %s %d dead letters", verb, matched), []string{"ID", "QUEUE", "KIND", "REASON", "ERROR"}, rows)
}

// printSample prints a dry run's headline and its sample as a table.
func printSample(w io.Writer, headline string, header []string, rows [][]string) error {
	fmt.Fprintf(w, "%s (dry run: nothing changed)\n", headline)
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nsample (%d):\n", len(rows))
	tw := newTable(w)
	fmt.Fprintf(tw, "  %s\n", strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\n", strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// CloseMatching is POST /v1/dlq/close, one batch per call.
func (r *remoteBackend) CloseMatching(ctx context.Context, p backstop.CloseMatchingParams) (backstop.CloseMatchingResult, error) {
	f := p.Filter
	req := api.CloseRequest{Queue: f.Queue, Kind: f.Kind, Reason: f.Reason, ErrorContains: f.ErrorContains, Attributes: f.Attrs,
		Where: f.Where, Status: p.Status, Why: p.Reason, Note: p.Note, Limit: p.Limit, All: p.All}
	if !f.Since.IsZero() {
		req.Since = &f.Since
	}
	if !f.Until.IsZero() {
		req.Until = &f.Until
	}
	if !p.Snapshot.IsZero() {
		req.Snapshot = &p.Snapshot
	}
	res, err := r.cl.CloseDLQ(ctx, req)
	if err != nil {
		return backstop.CloseMatchingResult{}, remoteErr(err)
	}
	return *res, nil
}
