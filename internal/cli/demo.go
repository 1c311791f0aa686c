package cli

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
)

func init() { register(demoCmd) }

const (
	demoDB    = "sqlite://backstop-demo.db"
	demoQueue = "demo"
	// demoMaxTasks keeps the demo a demo; `backstop bench` is for load.
	demoMaxTasks = 100_000
)

// The demo's retry policy is short so the workload settles in seconds.
var demoRetry = &bt.RetryPolicy{Schedule: []bt.Duration{
	bt.Duration(100 * time.Millisecond), bt.Duration(200 * time.Millisecond), bt.Duration(400 * time.Millisecond)}}

func demoCmd(a *app) *cobra.Command {
	var (
		n     int
		fresh bool
		serve bool
		addr  string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a mixed workload that fails part of the time, then show what happened",
		Long: `Run a mixed workload on a fresh SQLite file (default ` + demoDB + `, not $BACKSTOP_DB):
emails that fail transiently, card charges that some cards decline for good, slow image
resizes (a few with payloads that cannot be decoded), and CRM syncs that sometimes time out.
An in-process worker retries them on a short schedule (100ms, 200ms, 400ms; 4 attempts) until
nothing is left to run, then the demo reports what succeeded, what needed retries, every
attempt by outcome, what is now in the dead-letter queue and why, and the commands to look
closer. The failures are seeded by task number, so every run tells the same story.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 || n > demoMaxTasks {
				return usageErr("--tasks %d: must be between 1 and %d", n, demoMaxTasks)
			}
			if !cmd.Flags().Changed("db") {
				a.dbURL = demoDB
			}
			if fresh {
				if err := freshDemoDB(cmd.Context(), a.dbURL); err != nil {
					return err
				}
			}
			if serve {
				return a.demoServe(cmd.Context(), addr)
			}
			rep, err := a.runDemo(cmd.Context(), n)
			if err != nil {
				return err
			}
			return a.print(rep, rep.print)
		},
	}
	cmd.Flags().IntVar(&n, "tasks", 200, "how many tasks to enqueue")
	cmd.Flags().BoolVar(&fresh, "fresh", true, "start from a new SQLite file (deletes the previous demo database)")
	cmd.Flags().BoolVar(&serve, "serve", false, "the live tour: serve the API (dev mode, loopback) with producers and handlers running until Ctrl-C")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "with --serve: listen address (loopback only)")
	return cmd
}

// freshDemoDB deletes the SQLite file a previous demo left, refusing to
// delete anything that holds tasks other than the demo's.
func freshDemoDB(ctx context.Context, url string) error {
	path, ok := strings.CutPrefix(url, "sqlite://")
	if !ok {
		return usageErr("--fresh deletes a SQLite file and cannot apply to %s; pass --fresh=false to run the demo there", url)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Size() > 0 {
		if err := checkDemoOnly(ctx, url); err != nil {
			return &exitError{code: ExitConflict, err: fmt.Errorf(
				"--fresh: %s does not look like a demo database (%v); not deleting it: choose another --db or pass --fresh=false", path, err)}
		}
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// checkDemoOnly succeeds when every task in the database is in the demo's
// queue.
func checkDemoOnly(ctx context.Context, url string) error {
	s, err := dburl.Open(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	f := backstop.ListParams{Limit: 1000}
	for {
		tasks, err := s.List(ctx, f)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if t.Queue != demoQueue {
				return fmt.Errorf("task %s is in queue %q", t.ID, t.Queue)
			}
		}
		if len(tasks) < f.Limit {
			return nil
		}
		f.AfterID = tasks[len(tasks)-1].ID
	}
}

// demoWorkload makes the i-th task of the demo. Which tasks fail for good is
// fixed by i, so any 20 consecutive tasks include every dead-letter reason.
func demoWorkload(i int, runID string) backstop.EnqueueParams {
	tenants := []string{"acme", "globex", "initech"}
	p := backstop.EnqueueParams{
		Queue:      demoQueue,
		Attributes: map[string]string{"demo_run": runID, "tenant": tenants[i%len(tenants)]},
	}
	var payload any
	switch slot := i % 20; {
	case slot < 8:
		to := fmt.Sprintf("user%d@example.com", i)
		if i%40 == 0 {
			to = "bounce@example.invalid" // always busy: exhausts its attempts
		}
		p.Kind, payload = "send_email", map[string]any{"n": i, "to": to, "template": "welcome"}
	case slot < 13:
		card := "tok_visa"
		if i%40 == 9 {
			card = "tok_insufficient_funds" // declined for good: permanent error
		}
		p.Kind, payload = "charge_card", map[string]any{"n": i, "card": card, "amount_cents": 500 + 100*(i%17)}
	case slot < 17:
		width := any(320 + 160*(i%4))
		if i%40 == 14 {
			width = "wide" // does not decode: poison
		}
		p.Kind, payload = "resize_image", map[string]any{"n": i, "url": fmt.Sprintf("https://img.example.com/%d.png", i), "width": width}
		p.Progress = backstop.Progress{Total: 4}
	default:
		p.Kind, payload = "sync_crm", map[string]any{"n": i, "account": fmt.Sprintf("acct-%04d", i)}
	}
	p.Payload, _ = json.Marshal(payload)
	return p
}

// demoRand is the randomness of one attempt: seeded by kind, task number
// and attempt, so reruns fail the same way.
func demoRand(t *backstop.Task, n int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(t.Kind))
	binary.Write(h, binary.LittleEndian, int64(n)) //nolint:errcheck // hashes do not fail
	return rand.New(rand.NewPCG(h.Sum64(), uint64(t.Attempt)))
}

func demoHandlers(w *backstop.Worker) {
	type emailPayload struct {
		N  int    `json:"n"`
		To string `json:"to"`
	}
	w.Handle("send_email", backstop.Typed(func(ctx context.Context, t *backstop.Task, p emailPayload) error {
		if p.To == "bounce@example.invalid" || demoRand(t, p.N).Float64() < 0.3 {
			return errors.New("smtp: 451 4.3.0 mailbox temporarily unavailable")
		}
		return nil
	}))
	type chargePayload struct {
		N    int    `json:"n"`
		Card string `json:"card"`
	}
	w.Handle("charge_card", backstop.Typed(func(ctx context.Context, t *backstop.Task, p chargePayload) error {
		if p.Card == "tok_insufficient_funds" {
			return backstop.ClassifyHTTPStatus(402) // permanent: retrying cannot help
		}
		if demoRand(t, p.N).Float64() < 0.15 {
			return backstop.ClassifyHTTPStatus(503) // transient
		}
		return nil
	}))
	type imagePayload struct {
		N     int    `json:"n"`
		URL   string `json:"url"`
		Width int    `json:"width"`
	}
	w.Handle("resize_image", backstop.Typed(func(ctx context.Context, t *backstop.Task, p imagePayload) error {
		r := demoRand(t, p.N)
		for step := 1; step <= 4; step++ {
			if err := sleepOrDone(ctx, time.Duration(20+r.IntN(60))*time.Millisecond); err != nil {
				return err
			}
			backstop.ReportProgress(ctx, step, 4)
		}
		return nil
	}))
	type crmPayload struct {
		N int `json:"n"`
	}
	w.Handle("sync_crm", backstop.Typed(func(ctx context.Context, t *backstop.Task, p crmPayload) error {
		d := 20 * time.Millisecond
		if demoRand(t, p.N).Float64() < 0.35 {
			d = 2 * time.Second // the CRM hangs; the 150ms timeout ends the attempt
		}
		return sleepOrDone(ctx, d)
	}))
}

func sleepOrDone(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (a *app) runDemo(ctx context.Context, n int) (*demoReport, error) {
	cfg := &backstop.Config{
		Logger: slog.New(slog.DiscardHandler), // the report is the output
		Queues: map[string]backstop.QueueConfig{demoQueue: {MaxAttempts: 4, Retry: demoRetry, Concurrency: 20}},
		Kinds:  map[string]backstop.KindConfig{"sync_crm": {Timeout: 150 * time.Millisecond}},
	}
	s, c, err := a.open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()

	runID := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	params := make([]backstop.EnqueueParams, n)
	for i := range params {
		params[i] = demoWorkload(i, runID)
	}
	for start := 0; start < n; start += batchSize {
		if _, err := c.EnqueueMany(ctx, params[start:min(start+batchSize, n)]); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(a.stderr, "demo: enqueued %d tasks in queue %q on %s; working...\n", n, demoQueue, a.dbURL)

	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{
		ID:                  "demo-worker",
		Queues:              map[string]int{demoQueue: 20},
		PollInterval:        100 * time.Millisecond,
		MaintenanceInterval: 100 * time.Millisecond,
		TimeoutGrace:        time.Second,
	})
	if err != nil {
		return nil, err
	}
	demoHandlers(w)
	began := time.Now()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	waitErr := waitQuiet(ctx, c, runID, max(2*time.Minute, time.Duration(n)*10*time.Millisecond))
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		return nil, err
	}
	if waitErr != nil {
		return nil, waitErr
	}
	return a.demoReport(ctx, c, runID, time.Since(began))
}

// waitQuiet returns once no task of the run is waiting or running.
func waitQuiet(ctx context.Context, c *backstop.Client, runID string, limit time.Duration) error {
	live := []bt.State{bt.StateScheduled, bt.StatePending, bt.StateRunning, bt.StateBuffered}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo interrupted: %w", ctx.Err())
		case <-tick.C:
		}
		left, err := c.List(ctx, backstop.ListParams{States: live, Attrs: map[string]string{"demo_run": runID}, Limit: 1})
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: tasks still running after %s (for example %s, %s)", limit, left[0].ID, left[0].State)
		}
	}
}

// demoReport is what the demo prints (-o json prints it as is).
type demoReport struct {
	DB                    string                  `json:"db"`
	Queue                 string                  `json:"queue"`
	RunID                 string                  `json:"run_id"`
	Tasks                 int                     `json:"tasks"`
	ElapsedSeconds        float64                 `json:"elapsed_seconds"`
	Succeeded             int                     `json:"succeeded"`
	SucceededAfterRetries int                     `json:"succeeded_after_retries"`
	Retried               int                     `json:"retried"` // tasks with more than one attempt
	Dead                  int                     `json:"dead"`
	AttemptsByOutcome     map[bt.Outcome]int      `json:"attempts_by_outcome"`
	DeadByReason          map[bt.DeadReason]int   `json:"dead_by_reason"`
	ByKind                map[string]*demoKindRow `json:"by_kind"`
	Commands              []string                `json:"commands"`

	sampleDead, sampleRetried *bt.Task
}

type demoKindRow struct {
	Tasks     int `json:"tasks"`
	Succeeded int `json:"succeeded"`
	Retried   int `json:"retried"`
	Dead      int `json:"dead"`
}

func (a *app) demoReport(ctx context.Context, c *backstop.Client, runID string, elapsed time.Duration) (*demoReport, error) {
	rep := &demoReport{
		DB: a.dbURL, Queue: demoQueue, RunID: runID, ElapsedSeconds: elapsed.Round(10 * time.Millisecond).Seconds(),
		AttemptsByOutcome: map[bt.Outcome]int{}, DeadByReason: map[bt.DeadReason]int{}, ByKind: map[string]*demoKindRow{},
	}
	f := backstop.ListParams{Attrs: map[string]string{"demo_run": runID}, Limit: 1000}
	for {
		page, err := c.List(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, lt := range page {
			t, err := c.Get(ctx, lt.ID)
			if err != nil {
				return nil, err
			}
			rep.add(t)
		}
		if len(page) < f.Limit {
			break
		}
		f.AfterID = page[len(page)-1].ID
	}
	self := selfCommand() + " --db " + shellQuote(a.dbURL)
	rep.Commands = []string{self + " dlq list"}
	if rep.sampleDead != nil {
		rep.Commands = append(rep.Commands, self+" dlq show "+rep.sampleDead.ID)
	}
	if rep.sampleRetried != nil {
		rep.Commands = append(rep.Commands, self+" tasks show "+rep.sampleRetried.ID)
	}
	rep.Commands = append(rep.Commands, self+" tasks list --queue "+demoQueue+" --attr demo_run="+runID)
	return rep, nil
}

// selfCommand is how the user ran this binary, for the commands the demo
// suggests: "go run ./cmd/backstop" when go run built it (an exe directory
// under a temporary go-build one), else "backstop".
func selfCommand() string {
	exe := os.Args[0]
	if strings.Contains(exe, "go-build") && filepath.Base(filepath.Dir(exe)) == "exe" {
		return "go run ./cmd/backstop"
	}
	return "backstop"
}

func (rep *demoReport) add(t *bt.Task) {
	rep.Tasks++
	row := rep.ByKind[t.Kind]
	if row == nil {
		row = &demoKindRow{}
		rep.ByKind[t.Kind] = row
	}
	row.Tasks++
	charged := 0
	for _, e := range t.Executions {
		rep.AttemptsByOutcome[e.Outcome]++
		if e.Outcome.Charged() {
			charged++
		}
	}
	retried := charged > 1
	if retried {
		rep.Retried++
		row.Retried++
	}
	switch t.State {
	case bt.StateSucceeded:
		rep.Succeeded++
		row.Succeeded++
		if retried {
			rep.SucceededAfterRetries++
			if rep.sampleRetried == nil || t.Attempt > rep.sampleRetried.Attempt {
				rep.sampleRetried = t
			}
		}
	case bt.StateDead:
		rep.Dead++
		row.Dead++
		rep.DeadByReason[t.DeadReason]++
		// The most telling dead letter has a history: prefer exhausted retries.
		if rep.sampleDead == nil || (t.DeadReason == bt.ReasonAttemptsExhausted && rep.sampleDead.DeadReason != bt.ReasonAttemptsExhausted) {
			rep.sampleDead = t
		}
	}
}

var demoOutcomes = []bt.Outcome{bt.OutcomeSucceeded, bt.OutcomeTransientError, bt.OutcomeTimeout,
	bt.OutcomePermanentError, bt.OutcomeCanceled, bt.OutcomeLeaseExpired, bt.OutcomeSnoozed, bt.OutcomeReleased}

func (rep *demoReport) print(w io.Writer) error {
	fmt.Fprintf(w, "Backstop demo: %d tasks in queue %q on %s, all settled after %.1fs\n\n",
		rep.Tasks, rep.Queue, rep.DB, rep.ElapsedSeconds)
	tw := newTable(w)
	fmt.Fprintf(tw, "  succeeded\t%d\t(%d of them after retries)\n", rep.Succeeded, rep.SucceededAfterRetries)
	fmt.Fprintf(tw, "  dead letters\t%d\t(in the dead-letter queue, waiting for an operator)\n", rep.Dead)
	if other := rep.Tasks - rep.Succeeded - rep.Dead; other > 0 {
		fmt.Fprintf(tw, "  other\t%d\t\n", other)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nattempts by outcome")
	tw = newTable(w)
	for _, o := range demoOutcomes {
		if n := rep.AttemptsByOutcome[o]; n > 0 {
			fmt.Fprintf(tw, "  %s\t%d\n", o, n)
		}
	}
	tw.Flush()

	if rep.Dead > 0 {
		fmt.Fprintln(w, "\ndead letters by reason")
		tw = newTable(w)
		for _, r := range bt.DeadReasons {
			if n := rep.DeadByReason[r]; n > 0 {
				fmt.Fprintf(tw, "  %s\t%d\n", r, n)
			}
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nby kind")
	tw = newTable(w)
	fmt.Fprintln(tw, "  KIND\tTASKS\tSUCCEEDED\tRETRIED\tDEAD")
	kinds := make([]string, 0, len(rep.ByKind))
	for k := range rep.ByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		r := rep.ByKind[k]
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\n", k, r.Tasks, r.Succeeded, r.Retried, r.Dead)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nlook closer")
	notes := map[string]string{}
	if t := rep.sampleDead; t != nil {
		notes["dlq show "+t.ID] = fmt.Sprintf("%s %s: %s", t.Kind, t.DeadReason, attemptsText(t))
	}
	if t := rep.sampleRetried; t != nil {
		notes["tasks show "+t.ID] = fmt.Sprintf("%s: succeeded on attempt %d", t.Kind, t.Attempt)
	}
	for _, cmd := range rep.Commands {
		note := ""
		for suffix, n := range notes {
			if strings.HasSuffix(cmd, suffix) {
				note = "   # " + n
			}
		}
		fmt.Fprintf(w, "  %s%s\n", cmd, note)
	}
	return nil
}

func attemptsText(t *bt.Task) string {
	if t.Attempt == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", t.Attempt)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r)
	}
	for _, r := range s {
		if !safe(r) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
