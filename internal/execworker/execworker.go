// Package execworker is the generic exec worker: a backstop.Handler that runs
// one program per task, which makes any language a Backstop worker.
//
// The program gets the payload on stdin and the task in its environment
// (BACKSTOP_TASK_ID, BACKSTOP_ATTEMPT, BACKSTOP_QUEUE, BACKSTOP_KIND,
// BACKSTOP_EXECUTION_ID and BACKSTOP_ATTR_<KEY> per attribute; for an ordered
// task BACKSTOP_ORDERING_KEY, BACKSTOP_SEQUENCE and BACKSTOP_GAPS; TRACEPARENT of
// the attempt's span when traces are recorded; BACKSTOP_RESULT_FILE, below).
// Its exit code
// classifies the attempt: 0 succeeds, 75 (EX_TEMPFAIL) and any other code are
// transient, configured codes are permanent. It runs in a process group of
// its own, killed whole when the attempt's context ends (timeout, cancel,
// shutdown) and when the program exits, so no grandchild outlives its task.
// A bounded tail of its stdout and then its stderr is kept with the execution.
//
// BACKSTOP_RESULT_FILE names a file of the attempt's own (removed after it)
// in the Handler's private temporary directory
// (backstop-results-<pid>-<random>, removed by Close; New removes those of
// workers killed before their Close, SweepResultDirs): a program that exits
// 0 may write its JSON result there (any JSON value, at most
// backstop.MaxResultBytes), which becomes the attempt's result (backstop.SetResult; a remote worker sends it
// with its completion): a workflow step's output. No file, or an empty one,
// is no result. A file that is not valid JSON or too large fails the
// attempt permanently, with an error naming the problem.
//
// BACKSTOP_PROGRESS_FILE names another file there, which the program may
// append "N/M" lines to (steps completed of total): the task's progress
// (progress.go).
//
// It must never leave a process or a goroutine behind after Work returns.
package execworker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop"
)

// ExitTempFail is EX_TEMPFAIL from sysexits.h: "try again later".
const ExitTempFail = 75

// Config configures a Handler.
type Config struct {
	// Command is the program and its arguments. Required.
	Command []string
	// PermanentExitCodes dead-letter the task at once. Default: none.
	PermanentExitCodes []int
	// OutputLimit bounds the kept tail of stdout+stderr, in bytes.
	// Default: 8 KiB.
	OutputLimit int
	// Env is the environment the task variables are added to.
	// Default: this process's environment.
	Env []string
	// Dir is the working directory. Default: this process's.
	Dir string
	// CancelGrace is how long a program whose task was canceled while it
	// ran (backstop.ErrTaskCanceled: an operator, or its workflow run's
	// cancel) has after SIGTERM to exit before its process group gets
	// SIGKILL. A program that exits 0 within it succeeded (its work is
	// recorded, and a workflow step compensated). Other ends of the
	// attempt (timeout, lost lease, shutdown past its grace) kill at once.
	// Default: 10s.
	CancelGrace time.Duration
	// ProgressInterval is how often the program's progress file is read
	// while it runs. Default: 250ms.
	ProgressInterval time.Duration
}

// DefaultCancelGrace is Config.CancelGrace's default.
const DefaultCancelGrace = 10 * time.Second

// Handler runs Config.Command for each task.
type Handler struct {
	cfg     Config
	path    string
	perm    map[int]bool
	env     []string
	results resultFiles
}

// resultFiles names each run's result and progress files: fresh names (a
// counter) in one private directory (mode 0700: this user's alone) made
// once per Handler (its name holds the pid, for SweepResultDirs), removed
// after the run; Close removes the directory.
// One directory for every run, not one made and removed per run: that
// pair of directory operations was a large part of the worker's own cost
// per task.
type resultFiles struct {
	mu   sync.Mutex
	dir  string
	next uint64
}

// names returns the run's result and progress file names, making the
// directory first if it is not there (the first run, or a cleaner that
// removed it).
func (r *resultFiles) names() (result, progress string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", resultDirPattern()); err != nil {
			return "", "", err
		}
	} else if err := os.Mkdir(r.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", "", err
	}
	r.next++
	base := filepath.Join(r.dir, strconv.FormatUint(r.next, 10))
	return base + ".result.json", base + ".progress", nil
}

// Close removes the directory of the result files (after the last run).
func (h *Handler) Close() error {
	h.results.mu.Lock()
	defer h.results.mu.Unlock()
	if h.results.dir == "" {
		return nil
	}
	err := os.RemoveAll(h.results.dir)
	h.results.dir = ""
	return err
}

var _ backstop.Handler = (*Handler)(nil)

// New checks cfg and resolves the program on PATH.
func New(cfg Config) (*Handler, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("execworker: no command to run")
	}
	path, err := exec.LookPath(cfg.Command[0])
	if err != nil {
		return nil, fmt.Errorf("execworker: %w", err)
	}
	if cfg.OutputLimit <= 0 {
		cfg.OutputLimit = 8 << 10
	}
	if cfg.CancelGrace < 0 {
		return nil, fmt.Errorf("execworker: cancel grace %s is negative", cfg.CancelGrace)
	}
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if cfg.ProgressInterval < 0 {
		return nil, fmt.Errorf("execworker: progress interval %s is negative", cfg.ProgressInterval)
	}
	cfg.ProgressInterval = cmp.Or(cfg.ProgressInterval, DefaultProgressInterval)
	perm := map[int]bool{}
	for _, c := range cfg.PermanentExitCodes {
		if c <= 0 || c > 255 {
			return nil, fmt.Errorf("execworker: permanent exit code %d is not between 1 and 255", c)
		}
		if c == ExitTempFail {
			return nil, fmt.Errorf("execworker: exit code %d (EX_TEMPFAIL) is always transient", c)
		}
		perm[c] = true
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	// Drop task variables inherited from an enclosing task (a worker run by
	// a worker), so a child never sees another task's attributes.
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "BACKSTOP_ATTR_") || strings.HasPrefix(kv, "BACKSTOP_TASK_ID=") ||
			strings.HasPrefix(kv, "BACKSTOP_ATTEMPT=") || strings.HasPrefix(kv, "BACKSTOP_QUEUE=") ||
			strings.HasPrefix(kv, "BACKSTOP_KIND=") || strings.HasPrefix(kv, "BACKSTOP_EXECUTION_ID=") ||
			strings.HasPrefix(kv, "BACKSTOP_ORDERING_KEY=") || strings.HasPrefix(kv, "BACKSTOP_SEQUENCE=") ||
			strings.HasPrefix(kv, "BACKSTOP_GAPS=") || strings.HasPrefix(kv, "TRACEPARENT=") ||
			strings.HasPrefix(kv, "TRACESTATE=") || strings.HasPrefix(kv, ResultFileEnv+"=") ||
			strings.HasPrefix(kv, ProgressFileEnv+"=")
	})
	// Result directories of workers killed before their Close; best
	// effort: what is left is the next worker's to sweep.
	_, _ = SweepResultDirs(os.TempDir())
	return &Handler{cfg: cfg, path: path, perm: perm, env: env}, nil
}

// EnvName is the environment variable carrying attribute key:
// BACKSTOP_ATTR_ and the key upper-cased, with every character that is not a
// letter or digit replaced by '_'.
func EnvName(key string) string {
	var b strings.Builder
	b.WriteString("BACKSTOP_ATTR_")
	for _, r := range strings.ToUpper(key) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Environ is the child's environment for t: the base environment, then the
// task's variables (attributes in key order, so collisions are stable).
func (h *Handler) Environ(t *backstop.Task) []string {
	env := slices.Clip(h.env)
	env = append(env,
		"BACKSTOP_TASK_ID="+t.ID,
		"BACKSTOP_ATTEMPT="+strconv.Itoa(t.Attempt),
		"BACKSTOP_QUEUE="+t.Queue,
		"BACKSTOP_KIND="+t.Kind,
		"BACKSTOP_EXECUTION_ID="+t.ExecutionID,
	)
	if t.OrderingKey != "" {
		env = append(env, orderingEnv(t)...)
	}
	keys := make([]string, 0, len(t.Attributes))
	for k := range t.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, EnvName(k)+"="+t.Attributes[k])
	}
	return env
}

// TraceEnv is TRACEPARENT (and TRACESTATE when there is one) for the span
// in ctx: the attempt's consumer span, so the program's own spans are its
// children (the OpenTelemetry environment-variable carrier). Empty when
// ctx carries no valid span context.
func TraceEnv(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	var env []string
	if v := c["traceparent"]; v != "" {
		env = append(env, "TRACEPARENT="+v)
	}
	if v := c["tracestate"]; v != "" {
		env = append(env, "TRACESTATE="+v)
	}
	return env
}

// outputDrain bounds how long Work waits for the output pipe to close after
// the process group is gone (a descendant that left the group may hold it).
const outputDrain = 2 * time.Second

// Work runs the command for one attempt and keeps its output tail with the
// execution (backstop.RecordDetail).
func (h *Handler) Work(ctx context.Context, t *backstop.Task) error {
	r := h.Run(ctx, t)
	if r.Output != "" {
		backstop.RecordDetail(ctx, r.Output)
	}
	if r.Err == nil && r.Value != nil {
		// Checked by Run; outside a worker's handler context there is no
		// attempt to keep it (ErrNotInHandler), and nothing to do.
		_ = backstop.SetResult(ctx, r.Value)
	}
	return r.Err
}

// Result is how one run of the command ended.
type Result struct {
	// Err is the attempt's result: nil, a transient error, or
	// backstop.Permanent.
	Err error
	// Output is the bounded tail of stdout, then of stderr (joinTails).
	Output string
	// ExitCode is the program's exit code, or -1 when it was killed.
	ExitCode int
	// Value is the JSON result the program wrote to $BACKSTOP_RESULT_FILE
	// (nil: none), when it succeeded.
	Value json.RawMessage
	// Progress is the last progress the program wrote to
	// $BACKSTOP_PROGRESS_FILE (nil: none).
	Progress *backstop.Progress
}

// ResultFileEnv names the file a program may write its JSON result to.
const ResultFileEnv = "BACKSTOP_RESULT_FILE"

// Run runs the command for t until it exits or ctx ends.
func (h *Handler) Run(ctx context.Context, t *backstop.Task) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: err, ExitCode: -1}
	}
	resultFile, progressFile, err := h.results.names()
	if err != nil {
		return Result{Err: fmt.Errorf("execworker: result file directory: %w", err), ExitCode: -1}
	}
	defer os.Remove(resultFile)
	defer os.Remove(progressFile)
	cmd := exec.Command(h.path, h.cfg.Command[1:]...)
	cmd.Args[0] = h.cfg.Command[0]
	cmd.Env = append(append(h.Environ(t), TraceEnv(ctx)...), ResultFileEnv+"="+resultFile, ProgressFileEnv+"="+progressFile)
	cmd.Dir = h.cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	// Our own pipes rather than exec's copying goroutines: Wait then
	// returns when the program exits, even if a grandchild still holds
	// stdout, and we decide how long to keep reading.
	// stdout and stderr each have a pipe, so the log tells them apart.
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{Err: fmt.Errorf("execworker: output pipe: %w", err), ExitCode: -1}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return Result{Err: fmt.Errorf("execworker: error pipe: %w", err), ExitCode: -1}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return Result{Err: fmt.Errorf("execworker: input pipe: %w", err), ExitCode: -1}
	}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = outW, errW, inR
	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	inR.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		inW.Close()
		return Result{Err: fmt.Errorf("execworker: start %s: %w", h.cfg.Command[0], err), ExitCode: -1}
	}
	pgid := cmd.Process.Pid

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		// A program that does not read its stdin makes this fail (EPIPE)
		// or block until the input pipe is closed below; both are fine.
		_, _ = inW.Write(t.Payload)
		inW.Close()
	}()
	// Each stream keeps its tail; the failure's detail is stdout's then
	// stderr's (joinTails): the two are read side by side, so their
	// relative order is not known.
	outTail, errTail := newTail(h.cfg.OutputLimit), newTail(h.cfg.OutputLimit)
	var reads sync.WaitGroup
	reads.Add(2)
	for _, p := range []struct {
		r      *os.File
		tail   *tail
		stream string
	}{{outR, outTail, backstop.LogStreamStdout}, {errR, errTail, backstop.LogStreamStderr}} {
		go func() {
			defer wg.Done()
			defer reads.Done()
			lines := &lineLog{ctx: ctx, stream: p.stream}
			_, _ = io.Copy(io.MultiWriter(p.tail, lines), p.r)
			lines.close()
		}()
	}
	readDone := make(chan struct{})
	go func() {
		reads.Wait()
		close(readDone)
	}()

	prog := &progressReader{ctx: ctx, path: progressFile}
	stopProgress, progressDone := make(chan struct{}), make(chan struct{})
	go prog.follow(h.cfg.ProgressInterval, stopProgress, progressDone)

	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()
	var waitErr error
	killed, stopped := false, false
	select {
	case waitErr = <-waitDone:
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), backstop.ErrTaskCanceled) {
			// Canceled: ask the program to stop, and give it the grace
			// to do so (or to finish what it was doing).
			stopped = true
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			grace := time.NewTimer(h.cfg.CancelGrace)
			select {
			case waitErr = <-waitDone:
			case <-grace.C:
				killed = true
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				waitErr = <-waitDone
			}
			grace.Stop()
			break
		}
		killed = true
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		waitErr = <-waitDone
	}
	// The program is gone; end whatever it left running in its group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-readDone:
	case <-time.After(outputDrain):
	}
	outR.Close()
	errR.Close()
	inW.Close() // unblocks a payload write nobody reads
	wg.Wait()
	close(stopProgress)
	<-progressDone

	elapsed := time.Since(start).Round(time.Millisecond)
	code := -1
	if cmd.ProcessState != nil && !killed {
		code = cmd.ProcessState.ExitCode()
	}
	r := Result{
		Err:      h.classify(ctx, cmd.ProcessState, waitErr, killed, stopped, elapsed),
		Output:   joinTails(h.cfg.OutputLimit, outTail, errTail),
		ExitCode: code,
		Progress: prog.last,
	}
	if r.Err == nil {
		r.Value, r.Err = readResult(resultFile)
	}
	return r
}

// readResult reads the JSON result a program left in its result file: none
// (nil) when there is no file or it is empty; a permanent error naming the
// problem when it is not a regular file, too large or not valid JSON (the
// program's output is wrong, and running it again will not change that).
func readResult(path string) (json.RawMessage, error) {
	bad := func(format string, args ...any) error {
		return backstop.Permanent(fmt.Errorf("%s (%s): %s", ResultFileEnv, path, fmt.Sprintf(format, args...)))
	}
	// O_NOFOLLOW and O_NONBLOCK: a symlink or a FIFO the program left
	// there must neither lead the worker elsewhere nor block it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, bad("cannot be read: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, bad("cannot be read: %v", err)
	}
	if !st.Mode().IsRegular() {
		return nil, bad("is not a regular file (%s)", st.Mode().Type())
	}
	if st.Size() > backstop.MaxResultBytes {
		return nil, bad("is %d bytes; a result is at most %d (1 MiB)", st.Size(), backstop.MaxResultBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, backstop.MaxResultBytes+1))
	if err != nil {
		return nil, bad("cannot be read: %v", err)
	}
	v, err := backstop.CheckResult(b)
	if err != nil {
		var ve *backstop.ValidationError
		if errors.As(err, &ve) {
			return nil, bad("%s", ve.Message)
		}
		return nil, bad("%v", err)
	}
	return v, nil
}

// classify turns how the program ended into the attempt's result.
func (h *Handler) classify(ctx context.Context, ps *os.ProcessState, waitErr error, killed, stopped bool, elapsed time.Duration) error {
	name := h.cfg.Command[0]
	if killed {
		cause := context.Cause(ctx)
		if stopped {
			return fmt.Errorf("%s killed (process group, SIGKILL) %s after SIGTERM, %s in all: %w", name, h.cfg.CancelGrace, elapsed, cause)
		}
		return fmt.Errorf("%s killed (process group, SIGKILL) after %s: %w", name, elapsed, cause)
	}
	if stopped && (ps == nil || !ps.Success()) {
		// It stopped when asked (SIGTERM): the attempt ends canceled,
		// whatever it exited with.
		return fmt.Errorf("%s stopped after SIGTERM (%s): %w", name, elapsed, context.Cause(ctx))
	}
	if ps == nil {
		return fmt.Errorf("%s: %w", name, waitErr)
	}
	if st, ok := ps.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		return fmt.Errorf("%s killed by signal %d (%s) after %s", name, int(st.Signal()), st.Signal(), elapsed)
	}
	code := ps.ExitCode()
	switch {
	case code == 0:
		return nil
	case code == ExitTempFail:
		return fmt.Errorf("%s exited with code %d (EX_TEMPFAIL, transient)", name, code)
	case h.perm[code]:
		return backstop.Permanent(fmt.Errorf("%s exited with code %d (permanent)", name, code))
	default:
		return fmt.Errorf("%s exited with code %d", name, code)
	}
}

// orderingEnv is an ordered task's key, sequence and gaps (docs/ordering.md):
// BACKSTOP_GAPS is a JSON array of {"from","to"}, [] when none.
func orderingEnv(t *backstop.Task) []string {
	gaps := []byte("[]")
	if len(t.Gaps) > 0 {
		gaps, _ = json.Marshal(t.Gaps) // []Gap of int64: cannot fail
	}
	return []string{"BACKSTOP_ORDERING_KEY=" + t.OrderingKey, "BACKSTOP_SEQUENCE=" + strconv.FormatInt(t.Sequence, 10),
		"BACKSTOP_GAPS=" + string(gaps)}
}
