package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/execworker"
)

func init() { register(workCmd) }

type workOptions struct {
	queues         []string
	kinds          []string
	concurrency    int
	prefetch       int
	lease          time.Duration
	exitAfterIdle  time.Duration
	exitWhenEmpty  bool
	permanentCodes []int
	grace          time.Duration
	cancelGrace    time.Duration
	outputLimit    int
	id             string
	leaderTTL      time.Duration
	config         string
	server         string
	token          string
	// perQueue: each queue's concurrency and lease (flags > env > the
	// queue's section of --config > defaults); see workqueues.go.
	perQueue    map[string]queueSettings
	metricsAddr string
	// labels and version describe the worker in the registry.
	labelFlags []string
	labels     map[string]string
	version    string
	// logConfig: the log section of --config (remote mode reads no other).
	logConfig config.Log
}

// Bounds of a worker's labels and version (the registry's).
const (
	maxWorkerLabels = 64
	maxWorkerField  = 255
)

// parseIdentity reads --label and --version.
func (o *workOptions) parseIdentity() error {
	m, err := parseKeyValues("--label", o.labelFlags)
	if err != nil {
		return err
	}
	if len(m) > maxWorkerLabels {
		return usageErr("--label: at most %d labels", maxWorkerLabels)
	}
	for k, v := range m {
		if len(v) > maxWorkerField {
			return usageErr("--label %s: a value is at most %d bytes", k, maxWorkerField)
		}
	}
	if len(o.version) > maxWorkerField {
		return usageErr("--version: at most %d bytes", maxWorkerField)
	}
	o.labels = m
	return nil
}

func workCmd(a *app) *cobra.Command {
	var o workOptions
	cmd := &cobra.Command{
		Use:   "work --queue Q [flags] -- CMD [ARG...]",
		Short: "Run a program for each task (payload on stdin, task in the environment)",
		Long: `work claims tasks from the given queues and runs CMD once per task, in a
process group of its own. The payload arrives on stdin; the environment carries
BACKSTOP_TASK_ID, BACKSTOP_ATTEMPT, BACKSTOP_QUEUE, BACKSTOP_KIND,
BACKSTOP_EXECUTION_ID and each attribute as BACKSTOP_ATTR_<KEY> (upper-cased,
other characters than letters and digits replaced by _). A program that exits
0 may write its JSON result to the file named by BACKSTOP_RESULT_FILE; to say
how far it got it appends lines N/M (steps completed of total) to the file
named by BACKSTOP_PROGRESS_FILE: the last line is the task's progress, sent
with the next heartbeat and kept when the attempt ends.

Exit code 0 succeeds; 75 (EX_TEMPFAIL) and any code not listed in
--permanent-exit-codes are transient (retried by policy); listed codes
dead-letter the task at once. On a timeout or a shutdown past its grace the
whole process group is killed (SIGKILL). When the task is canceled while its
program runs (backstop tasks cancel, or the cancel of its workflow run) the
process group gets SIGTERM, then SIGKILL after --cancel-grace: a program that
still exits 0 did its work, and the attempt succeeds (a workflow step is then
compensated with the rest of its run); any other end is canceled. Every line the program writes (stdout and stderr)
goes to the execution's log: backstop tasks logs ID. The last --output-limit
bytes (8 KiB) are also kept with the attempt as its detail: backstop dlq show
ID, or the executions' error_detail in backstop tasks show ID -o json.

On the database (--db), --prefetch N claims up to N tasks per queue ahead of
the free slots (default 0: none), so a slot that frees starts its next
program without waiting for a claim. It does so only while programs run
short (a recent mean under 1s): a task claimed ahead then waits for a slot
briefly. It is leased, heartbeated and shown as running meanwhile.

--exit-when-empty drains the queues and exits 0: as soon as a claim finds
nothing claimable on the worker's queues while none of its programs runs
(nor waits, claimed ahead), with every outcome written. Tasks scheduled for
later, or held back by a concurrency or rate limit or their ordering key, do
not keep it running: the next worker takes them (as Graphile Worker's
--once). A task enqueued while it exits is left for the next worker too.
It excludes --exit-after-idle, which waits that long for new work. Over
--server it works the same: its claims then return at once instead of
long-polling.

On SIGTERM or SIGINT the worker drains: it stops claiming, releases the tasks
claimed ahead that have not started (uncharged, the release recorded), lets
running programs finish within --grace, then kills the rest and releases their
tasks without charging an attempt. A second signal ends the grace period at once.
Logs are JSON lines on stderr.

With --server URL (env BACKSTOP_SERVER) and --token T (env BACKSTOP_TOKEN) the
worker talks to a Backstop server over its HTTP worker protocol instead of the
database: long-poll claims, heartbeats every lease/3, complete or fail with the
outcome class of the exit code. The server's maintenance settles the tasks of a
worker that died. On a drain whose grace runs out, the killed programs' tasks
are released without charging an attempt (POST /v1/tasks/{id}/release), as in
local mode. A drain does not hang up on a claim still out: it stops it by name
(POST /v1/claims/{claim_id}/stop), reads its answer and releases the tasks it
brought, uncharged; a second signal cuts a claim still out 2s later.

--config FILE reads queue settings (concurrency, lease) and leader_ttl from a
configuration file; flags win over BACKSTOP_* variables, which win over it.`,
		Example: `  backstop work --queue emails --concurrency 4 -- ./send-email.sh
  backstop work --queue backfill --concurrency 32 --exit-when-empty -- ./backfill-one.sh
  backstop work --queue etl --kind load --permanent-exit-codes 65,100 --exit-after-idle 10s -- python load.py`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("work: missing the command to run: backstop work --queue Q -- CMD [ARG...]")
			}
			cfg, err := a.workConfig(cmd, &o)
			if err != nil {
				return err
			}
			if err := o.parseIdentity(); err != nil {
				return err
			}
			if o.exitWhenEmpty && o.exitAfterIdle != 0 {
				return usageErr("work: --exit-when-empty and --exit-after-idle exclude each other: pick one")
			}
			o.logConfig = cfg.Log
			o.server, o.token = a.server, a.token
			if o.server != "" {
				return a.remoteWork(cmd.Context(), &o, args)
			}
			return a.work(cmd.Context(), &o, args, cfg)
		},
	}
	// Flags end at the first argument, the command, so "--" is optional
	// and the command's own flags are never taken for work's.
	cmd.Flags().SetInterspersed(false)
	f := cmd.Flags()
	f.StringArrayVar(&o.queues, "queue", nil, "queue to work (repeatable; required)")
	f.StringArrayVar(&o.kinds, "kind", nil, "only claim tasks of this kind (repeatable; default: every kind)")
	f.IntVar(&o.concurrency, "concurrency", 10, "programs running at once, per queue")
	f.IntVar(&o.prefetch, "prefetch", 0, "tasks claimed ahead of free slots, per queue (at most --concurrency), started as slots free, while programs run under 1s on average (0: none)")
	f.DurationVar(&o.lease, "lease", 30*time.Second, "lease of a claimed task, renewed by heartbeats every lease/3")
	f.DurationVar(&o.exitAfterIdle, "exit-after-idle", 0, "exit 0 once no task has been claimable for this long (0: never)")
	f.BoolVar(&o.exitWhenEmpty, "exit-when-empty", false, "exit 0 once a claim finds nothing claimable and no program runs (tasks scheduled for later do not keep it running)")
	f.IntSliceVar(&o.permanentCodes, "permanent-exit-codes", nil, "exit codes that dead-letter the task at once (e.g. 65,100)")
	f.DurationVar(&o.grace, "grace", 30*time.Second, "on SIGTERM/SIGINT, how long running programs may finish before they are killed and released")
	f.DurationVar(&o.cancelGrace, "cancel-grace", execworker.DefaultCancelGrace, "when a running task is canceled, how long its program has after SIGTERM before SIGKILL")
	f.IntVar(&o.outputLimit, "output-limit", 8<<10, "bytes of stdout+stderr kept per execution (the tail)")
	f.StringVar(&o.id, "id", "", "worker id, recorded in leases, executions and the maintenance leadership (default: host-pid-random)")
	f.DurationVar(&o.leaderTTL, "leader-ttl", 15*time.Second, "maintenance leadership lease: another worker takes over this long after the leader died")
	f.StringVar(&o.config, "config", "", "configuration file (YAML, docs/configuration.md); flags > BACKSTOP_* env > file > defaults")
	f.StringArrayVar(&o.labelFlags, "label", nil, "a label of this worker in the registry, key=value (repeatable)")
	f.StringVar(&o.version, "version", "", "this worker's version in the registry (e.g. of the program it runs)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464; default: off)")
	return cmd
}

// workConfig applies --config and the environment to the flags the user did
// not set: flags > env > file > defaults. It returns the configuration.
func (a *app) workConfig(cmd *cobra.Command, o *workOptions) (*config.Config, error) {
	cfg, err := a.loadConfig(o.config)
	if err != nil {
		return nil, err
	}
	fl := cmd.Flags()
	if !fl.Changed("db") && cfg.DB != "" {
		a.dbURL = cfg.DB
	}
	if !fl.Changed("leader-ttl") && cfg.LeaderTTL != 0 {
		o.leaderTTL = cfg.LeaderTTL.D()
	}
	o.perQueue = perQueueSettings(o, cfg, fl.Changed("lease"), fl.Changed("concurrency"))
	return cfg, nil
}

// idleCheck is when to look at the worker's idle time next, given the
// last look (idle: zero while it works) and --exit-after-idle: when an idle
// worker would reach the limit, so it exits then rather than up to a
// polling period later; while it works, a quarter of the limit (at most
// 250ms).
func idleCheck(idle, limit time.Duration) time.Duration {
	if idle > 0 {
		return limit - idle
	}
	return min(limit/4, 250*time.Millisecond)
}

func (a *app) work(ctx context.Context, o *workOptions, command []string, cfg *config.Config) error {
	if len(o.queues) == 0 {
		return usageErr("work: --queue is required")
	}
	if err := o.checkQueues(); err != nil {
		return err
	}
	if o.exitAfterIdle < 0 || o.grace < 0 || o.cancelGrace <= 0 {
		return usageErr("work: --exit-after-idle and --grace must not be negative, --cancel-grace must be positive")
	}
	if o.prefetch < 0 {
		return usageErr("work: --prefetch must not be negative")
	}
	if o.outputLimit < 1 {
		return usageErr("work: --output-limit must be at least 1")
	}
	h, err := execworker.New(execworker.Config{
		Command: command, PermanentExitCodes: o.permanentCodes, OutputLimit: o.outputLimit, CancelGrace: o.cancelGrace,
	})
	if err != nil {
		return usageErr("work: %v", err)
	}
	defer h.Close() //nolint:errcheck // best effort: a directory of leftover result files

	tel, c, closeAll, err := a.openWorkProcess(ctx, cfg, o.metricsAddr)
	if err != nil {
		return err
	}
	defer closeAll()
	log := tel.Logger
	defer startGauges(ctx, tel, c, cfg, log)()
	if err := putConfigSchedules(ctx, c, cfg, log); err != nil {
		return err
	}
	if err := applyLimits(ctx, c, cfg.ConcurrencyLimits(), log); err != nil { // limits.go
		return err
	}
	if err := applyFair(ctx, c, cfg.FairQueues(), log); err != nil { // queues_fair.go
		return err
	}

	// One library Worker per distinct lease (a Worker has one lease);
	// usually there is one.
	var ws workers
	for i, g := range leaseGroups(o) {
		id := o.id
		if id != "" && i > 0 {
			id = fmt.Sprintf("%s-%d", o.id, i+1)
		}
		w, err := backstop.NewWorker(c, &backstop.WorkerConfig{ID: id, Queues: g.queues, Kinds: o.kinds, Lease: g.lease,
			LeaderTTL: o.leaderTTL, Labels: o.registryLabels(), Version: o.registryVersion(),
			// A canceled program's SIGTERM grace, and a little more to
			// reap it and read its result, before the attempt is
			// settled without it.
			TimeoutGrace: max(5*time.Second, o.cancelGrace+2*time.Second),
			Prefetch:     o.prefetch,
			// One completer: programs finish a few at a time, so two
			// completers write small batches on two connections; one
			// writes bigger batches on one (docs/benchmarks.md).
			SettleParallelism: 1,
			WatchEmpty:        o.exitWhenEmpty})
		if err != nil {
			ws.stop(context.Background())
			return usageErr("work: %v", err)
		}
		if len(o.kinds) == 0 {
			w.HandleDefault(h)
		}
		for _, k := range o.kinds {
			w.Handle(k, h)
		}
		if err := w.Start(ctx); err != nil {
			ws.stop(context.Background())
			return err
		}
		ws = append(ws, w)
		log.Info("worker started", "worker_id", w.ID(), "queues", g.queues, "kinds", o.kinds,
			"lease", g.lease.String(), "leader_ttl", o.leaderTTL.String(), "command", command)
	}
	w := ws

	var idle <-chan time.Time
	var idleTimer *time.Timer
	if o.exitAfterIdle > 0 {
		idleTimer = time.NewTimer(idleCheck(0, o.exitAfterIdle))
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	empty := w.empty(stopWatch)
	reason := ""
	for reason == "" {
		select {
		case <-ctx.Done():
			reason = "signal"
		case <-empty:
			reason = "empty"
		case <-idle:
			if d := w.IdleFor(); d >= o.exitAfterIdle {
				reason = "idle"
			} else {
				idleTimer.Reset(idleCheck(d, o.exitAfterIdle))
			}
		}
	}

	log.Info("worker draining", "worker_id", w.ID(), "reason", reason, "running", w.Running(), "grace", o.grace.String())
	stopCtx, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			log.Warn("second signal: ending the grace period now", "worker_id", w.ID())
			cancel()
		case <-stopCtx.Done():
		}
	}()
	if err := w.stop(stopCtx); err != nil {
		return fmt.Errorf("work: stop: %w", err)
	}
	log.Info("worker stopped", "worker_id", w.ID(), "reason", reason)
	return nil
}
