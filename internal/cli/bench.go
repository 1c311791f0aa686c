package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/internal/telemetry"
)

func init() { register(benchCmd) }

func benchCmd(a *app) *cobra.Command {
	var cfg bench.Config
	var prof benchProfiles // bench_profile.go
	var hist benchHistory  // bench_history.go
	withTelemetry, canary := true, true
	cmd := &cobra.Command{
		Use:   "bench [-n N | --duration D [--rate R]] [--workers N] [--batch N] [--history N [--probe P]]",
		Short: "Measure throughput (and latency) with no-op tasks on --db",
		Long: `bench works no-op tasks on the database named by --db, in a private queue
(bench-<time>-<random>) so runs never interfere; its tasks stay in the database,
so point it at a scratch one.

  drain (-n N, the default with N=100000): insert N tasks in batches, then
      time one worker (concurrency --workers) working them down, up to the last
      completion written; every task must end succeeded.
  continuous (--duration D): insert and work at once for D.
  latency (--rate R --duration D): enqueue single tasks (one Enqueue call
      each) at R per second on schedule, the calls overlapping as concurrent
      producers' would (the client writes them together), and report the
      rate held, the calls' latency and the enqueue-to-start latency (p50, p99).

On Postgres the latency mode also runs a canary: on a connection of its own,
every 20ms a one-row INSERT into a table of its own (bench_canary_<suffix>,
dropped at the end), committed durably; its commit latency (p50, p99) is the
server's own floor, printed beside the pickup's. BACKSTOP_BENCH_STAGES=FILE
writes every task's stages to FILE (CSV) and takes claim_to_start apart (the
claim statement, the wait for a connection, the hand-off to the handler).

The last line is always:
  bench: worked=<n> elapsed=<seconds>s jobs_per_sec=<rate>
With -o json the report lines go to stderr and stdout holds one JSON object
(mode, worked, elapsed_s, jobs_per_sec, enqueued; latency, canary and
go_runtime in latency mode).
` + benchHistoryHelp + `

Profiling (hidden flags): --cpuprofile FILE writes a Go CPU profile of the
whole run, --memprofile FILE an allocation profile (all allocations since the
start, sampled) at its end; read them with go tool pprof.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("n") && cfg.Duration > 0 {
				return usageErr("bench: give -n or --duration, not both")
			}
			if cfg.Rate > 0 && cfg.Duration == 0 {
				return usageErr("bench: --rate needs --duration")
			}
			if cfg.Duration > 0 {
				cfg.N = 0
			}
			cfg.NoCanary = !canary
			if cfg.FollowEvents && (cfg.Duration > 0 || cfg.Rate > 0) {
				return usageErr("bench: --follow-events needs drain mode (-n)")
			}
			if cfg.N < 0 || cfg.Workers < 1 || cfg.Batch < 1 || cfg.Rate < 0 || cfg.Duration < 0 {
				return usageErr("bench: -n, --workers, --batch, --rate and --duration must be positive")
			}
			if err := hist.check(cmd, cfg); err != nil {
				return err
			}
			if hist.on && a.output == "json" {
				return usageErr("bench: -o json is not for --history (its report is lines)")
			}
			if err := prof.start(); err != nil {
				return err
			}
			err := a.bench(cmd.Context(), cfg, withTelemetry, &hist)
			return errors.Join(err, prof.stop())
		},
	}
	f := cmd.Flags()
	f.IntVarP(&cfg.N, "n", "n", 100_000, "drain mode: tasks to insert, then work down")
	f.DurationVar(&cfg.Duration, "duration", 0, "continuous mode (or latency mode with --rate): how long to run")
	f.Float64Var(&cfg.Rate, "rate", 0, "latency mode: tasks enqueued per second, one Enqueue call each")
	f.IntVar(&cfg.Workers, "workers", 2000, "worker concurrency (2000, as River's own bench uses)")
	f.IntVar(&cfg.Batch, "batch", 1000, "tasks per enqueue batch")
	f.Var(payloadFlag{&cfg.Payload}, "payload", "every task's payload, a JSON object (default: none, {})")
	f.BoolVar(&cfg.FollowEvents, "follow-events", false, "drain mode: follow the event log's all stream during the run and report its delivery lag")
	f.BoolVar(&canary, "canary", true, "latency mode on Postgres: a commit every 20ms on a connection of its own beside the run, its latency reported (false: none)")
	f.BoolVar(&withTelemetry, "telemetry", true, "record metrics (and traces when OTEL_* asks) as serve and work do; false: no telemetry")
	f.StringVar(&prof.cpu, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	f.StringVar(&prof.mem, "memprofile", "", "write a Go allocation profile at the end of the run to this file")
	hist.register(f)
	_ = f.MarkHidden("cpuprofile")
	_ = f.MarkHidden("memprofile")
	cmd.AddCommand(benchOrderingCmd(a)) // bench_ordering.go
	cmd.AddCommand(benchFloorCmd(a))    // bench_floor.go
	cmd.AddCommand(benchSustainCmd(a))  // bench_sustain.go
	return cmd
}

func (a *app) bench(ctx context.Context, cfg bench.Config, withTelemetry bool, hist *benchHistory) error {
	log := slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lib := &backstop.Config{Logger: log}
	if withTelemetry {
		// As serve and work run: metrics recorded by the SDK (scraped or
		// not), traces when OTEL_* asks.
		tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "backstop-bench", LogOutput: a.stderr, LogLevel: slog.LevelWarn})
		if err != nil {
			return err
		}
		defer tel.Shutdown(context.WithoutCancel(ctx))
		lib.MeterProvider, lib.TracerProvider = tel.MeterProvider, tel.TracerProvider
	}
	s, c, err := a.open(ctx, lib)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg.Progress = a.stdout
	if hist.on {
		return a.benchHistory(ctx, s, c, cfg, hist)
	}
	if a.output == "json" {
		cfg.Progress = a.stderr // stdout holds the one JSON object
	}
	start := time.Now()
	res, err := bench.Run(ctx, c, cfg)
	if err != nil {
		return fmt.Errorf("%w (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	if a.output == "json" {
		return a.printJSON(res.JSON())
	}
	fmt.Fprintln(a.stdout, res.Summary())
	return nil
}

// payloadFlag is --payload of bench and bench floor: a JSON object, or
// the flag is refused (exit 2) naming it.
type payloadFlag struct{ p *json.RawMessage }

func (f payloadFlag) String() string {
	if f.p == nil {
		return ""
	}
	return string(*f.p)
}

func (f payloadFlag) Set(v string) error {
	if err := bench.CheckPayload(json.RawMessage(v)); err != nil || v == "" {
		return fmt.Errorf("must be a JSON object, e.g. '{\"customer_id\": 42}'")
	}
	*f.p = json.RawMessage(v)
	return nil
}

func (payloadFlag) Type() string { return "json" }
