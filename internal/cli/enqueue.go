package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

func init() { register(enqueueCmd) }

const (
	// batchSize is how many records of a batch file go in one transaction.
	batchSize = 1000
	// maxInputLine bounds one NDJSON record (and --payload-file), far above
	// the largest payload the library accepts, so a runaway input fails
	// with a message instead of exhausting memory.
	maxInputLine = 64 << 20
)

type enqueueFlags struct {
	queue, kind, payload, payloadFile, id string
	maxAttempts, priority, totalSteps     int
	retrySchedule                         string
	timeout, delay, uniqueFor             time.Duration
	deadline, runAt                       string
	attrs                                 []string
	idempotencyKey, mergeKey, mergeRule   string
	debounceKey                           string
	debounceFor, debounceMaxWait          time.Duration
	complexity                            float64
	orderingKey                           string
	sequence                              int64
	batchFile                             string
	trace                                 bool
}

func enqueueCmd(a *app) *cobra.Command {
	var f enqueueFlags
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "Enqueue a task, or a batch of tasks from NDJSON",
		Long: `Enqueue one task described by flags, or many from --batch-file (NDJSON: one task object
per line, with the task's JSON keys: id, queue, kind, payload, priority, run_at, delay,
max_attempts, timeout, deadline, retry {schedule, base, factor, max}, attributes,
idempotency_key, unique_for, merge_key, debounce {key, for, max_wait}, progress {total_steps, completed_steps}, complexity, ordering_key,
sequence, trace).

A batch file is checked completely before anything is written; a bad record names its line
and exits 2. Tasks are then written in transactions of 1000, each all or nothing.

Table output is the task id (stdout), with a note on stderr when the task merged into a
waiting one or an idempotency key returned an existing one. JSON output is the task plus
"merged" and "duplicate".`,
		Example: `  backstop enqueue --queue email --kind send_email --payload '{"to":"a@example.com"}'
  backstop enqueue --queue crm --kind sync --attr tenant=acme --retry-schedule 10s,1m --max-attempts 5
  backstop enqueue --batch-file tasks.ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.batchFile != "" {
				for _, name := range []string{"queue", "kind", "payload", "payload-file", "id", "max-attempts",
					"retry-schedule", "timeout", "deadline", "delay", "run-at", "attr", "idempotency-key", "unique-for",
					"debounce", "debounce-for", "debounce-max-wait",
					"merge-key", "priority", "total-steps", "complexity", "ordering-key", "sequence", "trace"} {
					if cmd.Flags().Changed(name) {
						return usageErr("--%s cannot be combined with --batch-file: put it in each record", name)
					}
				}
				return a.enqueueBatch(cmd.Context(), f.batchFile, f.mergeRule)
			}
			return a.enqueueOne(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "queue to put the task in (required)")
	fl.StringVar(&f.kind, "kind", "", "kind of task: the handler it runs (required)")
	fl.StringVar(&f.payload, "payload", "", "JSON payload (default {})")
	fl.StringVar(&f.payloadFile, "payload-file", "", "read the JSON payload from this file (- for stdin)")
	fl.StringVar(&f.id, "id", "", "task id (default a new UUIDv7)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts before the task dead-letters (default: kind, queue, then 25)")
	fl.StringVar(&f.retrySchedule, "retry-schedule", "", "explicit delays between attempts, e.g. 1s,10s,1m (the last repeats)")
	fl.DurationVar(&f.timeout, "timeout", 0, "timeout of each attempt, e.g. 30s (default: kind, then queue)")
	fl.StringVar(&f.deadline, "deadline", "", "RFC 3339 time after which the task dies with reason expired")
	fl.DurationVar(&f.delay, "delay", 0, "run the first attempt after this long")
	fl.StringVar(&f.runAt, "run-at", "", "run the first attempt at this RFC 3339 time")
	fl.StringArrayVar(&f.attrs, "attr", nil, "attribute key=value (repeatable)")
	fl.StringVar(&f.idempotencyKey, "idempotency-key", "", "while a live task has this key, return it instead of adding one")
	fl.DurationVar(&f.uniqueFor, "unique-for", 0, "give --idempotency-key a window, e.g. 1h: within it the first task is returned whatever its state, past it a new task is made")
	fl.StringVar(&f.mergeKey, "merge-key", "", "while a task of this kind with this key waits, merge into it")
	fl.StringVar(&f.debounceKey, "debounce", "", "debounce key: replace (or, with a merge rule, merge into) the waiting task of this key and delay it until quiet")
	fl.DurationVar(&f.debounceFor, "debounce-for", 0, "with --debounce: run once no enqueue of the key arrived for this long, e.g. 5s")
	fl.DurationVar(&f.debounceMaxWait, "debounce-max-wait", 0, "with --debounce: but never later than this after the first enqueue, e.g. 1m")
	fl.StringVar(&f.mergeRule, "merge-rule", "", "how payloads merge: replace (default) or append")
	fl.IntVar(&f.priority, "priority", 0, "higher runs first")
	fl.IntVar(&f.totalSteps, "total-steps", 0, "progress: how many steps the task has")
	fl.Float64Var(&f.complexity, "complexity", 0, "producer's estimate of the task's complexity")
	fl.StringVar(&f.orderingKey, "ordering-key", "", "ordering key: on a queue with ordering, its tasks run one at a time in sequence order")
	fl.Int64Var(&f.sequence, "sequence", 0, "the task's sequence within its ordering key")
	fl.BoolVar(&f.trace, "trace", false, "trace the task whatever the sampling ratio (its send and attempt spans are sampled)")
	fl.StringVar(&f.batchFile, "batch-file", "", "enqueue the NDJSON records of this file (- for stdin)")
	return cmd
}

// enqueueParams turns the flags into enqueue parameters; the library validates
// the values, the flags' syntax is checked here.
func (a *app) enqueueParams(cmd *cobra.Command, f *enqueueFlags) (backstop.EnqueueParams, error) {
	p := backstop.EnqueueParams{
		ID: f.id, Queue: f.queue, Kind: f.kind, Priority: f.priority, MaxAttempts: f.maxAttempts,
		Timeout: f.timeout, Delay: f.delay, IdempotencyKey: f.idempotencyKey, UniqueFor: f.uniqueFor, MergeKey: f.mergeKey,
		Progress: backstop.Progress{Total: f.totalSteps}, Complexity: f.complexity,
		OrderingKey: f.orderingKey, Sequence: f.sequence, Trace: f.trace,
	}
	if f.queue == "" {
		return p, usageErr("--queue is required")
	}
	if f.kind == "" {
		return p, usageErr("--kind is required")
	}
	switch {
	case cmd.Flags().Changed("payload") && f.payloadFile != "":
		return p, usageErr("give --payload or --payload-file, not both")
	case f.payloadFile != "":
		b, err := a.readInput(f.payloadFile, "--payload-file")
		if err != nil {
			return p, err
		}
		p.Payload = b
	case f.payload != "":
		p.Payload = json.RawMessage(f.payload)
	}
	if cmd.Flags().Changed("unique-for") && f.uniqueFor <= 0 {
		return p, usageErr("--unique-for must be a positive duration such as 1h (got %s)", f.uniqueFor)
	}
	if err := debounceFlags(cmd, f, &p); err != nil {
		return p, err
	}
	if cmd.Flags().Changed("delay") && f.runAt != "" {
		return p, usageErr("give --delay or --run-at, not both")
	}
	var err error
	if f.runAt != "" {
		if p.RunAt, err = parseTime("run-at", f.runAt); err != nil {
			return p, err
		}
	}
	if f.deadline != "" {
		if p.Deadline, err = parseTime("deadline", f.deadline); err != nil {
			return p, err
		}
	}
	if f.retrySchedule != "" {
		sched, err := parseSchedule(f.retrySchedule)
		if err != nil {
			return p, err
		}
		p.Retry = &bt.RetryPolicy{Schedule: sched}
	}
	if p.Attributes, err = parseAttrs(f.attrs); err != nil {
		return p, err
	}
	return p, nil
}

// debounceFlags sets p.Debounce from --debounce, --debounce-for and
// --debounce-max-wait; a duration given must be positive.
func debounceFlags(cmd *cobra.Command, f *enqueueFlags, p *backstop.EnqueueParams) error {
	fl := cmd.Flags()
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"debounce-for", f.debounceFor}, {"debounce-max-wait", f.debounceMaxWait}} {
		if !fl.Changed(c.name) {
			continue
		}
		if !fl.Changed("debounce") {
			return usageErr("--%s needs --debounce KEY", c.name)
		}
		if c.d <= 0 {
			return usageErr("--%s must be a positive duration such as 5s (got %s)", c.name, c.d)
		}
	}
	if !fl.Changed("debounce") {
		return nil
	}
	if !fl.Changed("debounce-for") {
		return usageErr("--debounce needs --debounce-for, the quiet period (e.g. 5s)")
	}
	p.Debounce = &backstop.Debounce{Key: f.debounceKey, For: f.debounceFor, MaxWait: f.debounceMaxWait}
	return nil
}

// readInput reads a whole file, or stdin for "-", up to maxInputLine bytes.
func (a *app) readInput(name, flag string) ([]byte, error) {
	r, closeFn, err := a.openInput(name, flag)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	b, err := io.ReadAll(io.LimitReader(r, maxInputLine+1))
	if err != nil {
		return nil, usageErr("%s %s: %v", flag, name, err)
	}
	if len(b) > maxInputLine {
		return nil, usageErr("%s %s: larger than %d MiB", flag, name, maxInputLine>>20)
	}
	return b, nil
}

func (a *app) openInput(name, flag string) (io.Reader, func(), error) {
	if name == "-" {
		return a.stdin, func() {}, nil
	}
	file, err := os.Open(name)
	if err != nil {
		return nil, nil, usageErr("%s: %v", flag, err)
	}
	// A directory opens fine and fails on the first read: say so up front,
	// as bad input like a missing file.
	if st, err := file.Stat(); err == nil && st.IsDir() {
		file.Close()
		return nil, nil, usageErr("%s %s: is a directory, not a file", flag, name)
	}
	return file, func() { file.Close() }, nil
}

// clientConfig is the client configuration for enqueueing kinds with an
// explicit --merge-rule.
func clientConfig(mergeRule string, kinds ...string) (*backstop.Config, error) {
	cfg := &backstop.Config{}
	switch backstop.MergeRule(mergeRule) {
	case "":
		return cfg, nil
	case backstop.MergeReplace, backstop.MergeAppend:
	default:
		return nil, usageErr("--merge-rule %q: use replace or append", mergeRule)
	}
	cfg.Kinds = map[string]backstop.KindConfig{}
	for _, k := range kinds {
		// An invalid kind is left for enqueue validation to name.
		if backstop.ValidID(k) == nil {
			cfg.Kinds[k] = backstop.KindConfig{MergeRule: backstop.MergeRule(mergeRule)}
		}
	}
	return cfg, nil
}

// enqueueJSON is the JSON result of enqueueing one task.
type enqueueJSON struct {
	taskJSON
	Merged    bool `json:"merged"`
	Duplicate bool `json:"duplicate"`
}

func (a *app) enqueueOne(cmd *cobra.Command, f *enqueueFlags) error {
	p, err := a.enqueueParams(cmd, f)
	if err != nil {
		return err
	}
	cfg, err := clientConfig(f.mergeRule, p.Kind)
	if err != nil {
		return err
	}
	if err := a.refuseOverServer(map[string]bool{"merge-rule": f.mergeRule != ""}, "the server's configuration decides how payloads merge"); err != nil {
		return err
	}
	if a.server == "" {
		var stop func()
		if cfg, stop, err = a.traced(cmd.Context(), cfg); err != nil {
			return err
		}
		defer stop()
	}
	c, err := a.backend(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.Enqueue(cliActor(cmd.Context()), p)
	if err != nil {
		return err
	}
	out := enqueueJSON{taskJSON: newTaskJSON(res.Task, false), Merged: res.Merged, Duplicate: res.Duplicate}
	return a.print(out, func(w io.Writer) error {
		switch {
		case res.Merged && p.Debounce != nil:
			fmt.Fprintf(a.stderr, "debounced into waiting task %s (key %q, merge_count %d), now runs at %s\n",
				res.Task.ID, res.Task.MergeKey, res.Task.MergeCount, fmtTime(res.Task.RunAt))
		case res.Merged:
			fmt.Fprintf(a.stderr, "merged into waiting task %s (merge_key %q, merge_count %d)\n",
				res.Task.ID, res.Task.MergeKey, res.Task.MergeCount)
		case res.Duplicate && res.Task.UniqueUntil != nil:
			fmt.Fprintf(a.stderr, "duplicate: task %s holds idempotency_key %q until %s (state %s)\n",
				res.Task.ID, res.Task.IdempotencyKey, fmtTime(*res.Task.UniqueUntil), res.Task.State)
		case res.Duplicate:
			fmt.Fprintf(a.stderr, "duplicate: task %s already has idempotency_key %q (state %s)\n",
				res.Task.ID, res.Task.IdempotencyKey, res.Task.State)
		}
		_, err := fmt.Fprintln(w, res.Task.ID)
		return err
	})
}

// batchSummary is the result of `enqueue --batch-file`.
type batchSummary struct {
	Records   int `json:"records"`   // task records read
	Enqueued  int `json:"enqueued"`  // new tasks
	Merged    int `json:"merged"`    // merged into a waiting task
	Duplicate int `json:"duplicate"` // an idempotency key returned a live task
}

// readBatch decodes every record of an NDJSON input, with the line each
// came from. Blank lines are skipped.
func readBatch(r io.Reader) ([]backstop.EnqueueParams, []int, error) {
	return readNDJSON(r, decodeBatchLine)
}

// readNDJSON decodes every record of an NDJSON input with decode, and
// answers the line each came from (blank lines skipped): a record decode
// refuses, or a line too long, is a usage error naming its line.
func readNDJSON[T any](r io.Reader, decode func([]byte) (T, error)) ([]T, []int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxInputLine)
	var (
		out   []T
		lines []int
		n     int
	)
	for sc.Scan() {
		n++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		v, err := decode(sc.Bytes())
		if err != nil {
			return nil, nil, usageErr("line %d: %v", n, err)
		}
		out = append(out, v)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, usageErr("line %d: longer than %d MiB", n+1, maxInputLine>>20)
		}
		return nil, nil, usageErr("--batch-file: %v", err)
	}
	return out, lines, nil
}

func (a *app) enqueueBatch(ctx context.Context, name, mergeRule string) error {
	r, closeFn, err := a.openInput(name, "--batch-file")
	if err != nil {
		return err
	}
	params, lines, err := readBatch(r)
	closeFn()
	if err != nil {
		return err
	}
	// The same id twice would fail in the store, perhaps after earlier
	// batches were written; say so before writing anything.
	seen := map[string]int{}
	kinds := map[string]bool{}
	for i, p := range params {
		kinds[p.Kind] = true
		if p.ID == "" {
			continue
		}
		if first, dup := seen[p.ID]; dup {
			return &exitError{code: ExitConflict, err: fmt.Errorf("line %d: id %q is also on line %d", lines[i], p.ID, first)}
		}
		seen[p.ID] = lines[i]
	}
	kindList := make([]string, 0, len(kinds))
	for k := range kinds {
		kindList = append(kindList, k)
	}
	cfg, err := clientConfig(mergeRule, kindList...)
	if err != nil {
		return err
	}
	if err := a.refuseOverServer(map[string]bool{"merge-rule": mergeRule != ""}, "the server's configuration decides how payloads merge"); err != nil {
		return err
	}
	c, err := a.backend(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()

	// Check every record before writing any.
	for start := 0; start < len(params); start += batchSize {
		end := min(start+batchSize, len(params))
		if err := c.Validate(params[start:end]...); err != nil {
			i := start
			var be *backstop.BatchError
			if errors.As(err, &be) {
				i += be.Index
				err = be.Err
			}
			return &exitError{code: exitCode(err), err: fmt.Errorf("line %d: %w", lines[i], err)}
		}
	}

	sum := batchSummary{Records: len(params)}
	for start := 0; start < len(params); start += batchSize {
		end := min(start+batchSize, len(params))
		rs, err := c.EnqueueMany(cliActor(ctx), params[start:end])
		var be *backstop.BatchError
		if errors.As(err, &be) && start == 0 {
			// The server checks each batch as the library does here; its
			// refusal names the record, and nothing was written.
			return &exitError{code: exitCode(be.Err), err: fmt.Errorf("line %d: %w", lines[start+be.Index], be.Err)}
		}
		if err != nil {
			written := ""
			if start > 0 {
				written = fmt.Sprintf("; the %d records before line %d were enqueued", start, lines[start])
			}
			return &exitError{code: exitCode(err),
				err: fmt.Errorf("lines %d-%d not enqueued: %w%s", lines[start], lines[end-1], err, written)}
		}
		for _, r := range rs {
			switch {
			case r.Merged:
				sum.Merged++
			case r.Duplicate:
				sum.Duplicate++
			default:
				sum.Enqueued++
			}
		}
	}
	return a.print(sum, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "enqueued %d, merged %d, duplicate %d (%d records)\n",
			sum.Enqueued, sum.Merged, sum.Duplicate, sum.Records)
		return err
	})
}
