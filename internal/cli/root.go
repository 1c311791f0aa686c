// Package cli implements the backstop command line. Commands are thin: they
// parse flags, call the library (the same functions the API will call) and
// print. Output is a table by default and stable snake_case JSON with -o json.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/store"
)

// Exit codes: part of the CLI contract.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitUsage    = 2 // bad input or usage
	ExitNotFound = 3
	ExitConflict = 4
)

// exitError carries an exit code chosen by a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr is bad input detected by the CLI itself.
func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode maps an error to the CLI's exit code.
func exitCode(err error) int {
	var ee *exitError
	var tooNew *store.SchemaTooNewError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &tooNew): // not bad input: the database is ahead of the binary
		return ExitFailure
	case errors.Is(err, store.ErrUnavailable): // temporary: nothing was wrong with the command
		return ExitFailure
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, backstop.ErrInvalid), errors.Is(err, dburl.ErrBadURL):
		// A --db the user got wrong is bad input; a database that cannot
		// be reached is a failure (exit 1).
		return ExitUsage
	case errors.Is(err, store.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, store.ErrConflict):
		return ExitConflict
	}
	return ExitFailure
}

// app is the state shared by all commands of one invocation.
type app struct {
	dbURL  string
	output string
	// server and token: talk to a Backstop server (--server) instead of
	// the database; see backend.go.
	server, token string
	serverFlag    bool // --server given on the command line
	// raw: show payloads as stored (--raw; audited); via names the
	// command in the audit event.
	raw bool
	via string
	// logLevel: --log-level, else BACKSTOP_LOG_LEVEL ("": neither; serve
	// and work then read log.level from their --config).
	logLevel string
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
}

// Main runs the CLI and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if a.server == "" {
		// A busy database, a full disk, a lost connection: named as such.
		// Over --server a failed request is the server's (its 503 is
		// classified in remoteErr), never taken for the store's.
		err = store.Classify(err)
	}
	code := exitCode(err)
	var ee *exitError
	if code == ExitFailure && !errors.As(err, &ee) && isCobraUsage(err) {
		code = ExitUsage
	}
	if errors.Is(err, store.ErrUnavailable) {
		fmt.Fprintln(stderr, "backstop:", err, "(temporary: run the command again later)")
		return code
	}
	fmt.Fprintln(stderr, "backstop:", err)
	return code
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "backstop",
		Short:         "Backstop: a durable task queue whose signature is the failure path",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       readBuildVersion().String(), // --version (version.go)
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.serverFlag = cmd.Flags().Changed("server")
			tuneGC(cmd, os.Getenv) // gc.go
			a.via = strings.TrimPrefix(cmd.CommandPath(), "backstop ")
			if err := checkTextFlags(cmd.Flags()); err != nil { // flags.go
				return err
			}
			if err := a.checkServerMode(cmd); err != nil {
				return err
			}
			if err := a.resolveLogLevel(cmd); err != nil {
				return err
			}
			if fl := cmd.Flags().Lookup("actor"); fl != nil && fl.Changed && a.server != "" {
				return usageErr("--actor cannot be used with --server: the server records the token's name as the actor")
			}
			switch a.output {
			case "table", "json":
				return nil
			}
			return usageErr("-o %q: use table or json", a.output)
		},
	}
	def := os.Getenv("BACKSTOP_DB")
	if def == "" {
		def = dburl.Default
	}
	root.PersistentFlags().StringVar(&a.dbURL, "db", def, "database URL: sqlite://PATH or postgres://... (env BACKSTOP_DB)")
	root.PersistentFlags().StringVar(&a.server, "server", os.Getenv("BACKSTOP_SERVER"), "talk to this Backstop server's HTTP API instead of the database (enqueue, tasks, dlq, workers, work, queues, events, runs; the other commands refuse it; env BACKSTOP_SERVER)")
	root.PersistentFlags().StringVar(&a.token, "token", os.Getenv("BACKSTOP_TOKEN"), "API token for --server (env BACKSTOP_TOKEN)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "", "log level: debug, info, warn or error (env BACKSTOP_LOG_LEVEL; serve and work also read log.level from --config; default info)")
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	for _, add := range commands {
		root.AddCommand(add(a))
	}
	// Added here rather than by Execute so CommandPaths sees them too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// How each command treats --server (BACKSTOP_SERVER). A command not listed
// works on the database and refuses a server with exit 2 before it starts,
// so a new command can never silently ignore --server; the test
// TestEveryCommandHonoursServer (cmd/backstop) runs every command with
// --server set and checks it; README.md lists the three groups.
const (
	viaServer = "server" // goes through the server's HTTP API
	noBackend = "none"   // reads neither a database nor a server
)

var serverModes = map[string]string{
	"enqueue": viaServer, "work": viaServer, "publish": viaServer, "activity": viaServer, "ingest": viaServer,
	"tasks list": viaServer, "tasks show": viaServer, "tasks cancel": viaServer, "tasks run-now": viaServer, "tasks delete": viaServer,
	"tasks reprioritize": viaServer, "tasks logs": viaServer,
	"dlq list": viaServer, "dlq show": viaServer, "dlq replay": viaServer, "dlq discard": viaServer,
	"dlq resolve": viaServer, "dlq redrive": viaServer, "dlq export": viaServer, "dlq purge": viaServer,
	"workers list": viaServer, "workers show": viaServer,
	"queues list": viaServer, "queues pause": viaServer, "queues resume": viaServer, "queues fair": viaServer,
	"events tail": viaServer, "runs show": viaServer, "runs list": viaServer, "runs cancel": viaServer, "runs resume": viaServer,
	"workflows apply": viaServer, "workflows list": viaServer, "workflows show": viaServer, "workflows run": viaServer,
	"redrives list": viaServer, "redrives show": viaServer, "redrives cancel": viaServer, "redrives resume": viaServer,
	"audit list": viaServer,
	// Periodic schedules (periodic.go).
	"periodic add": viaServer, "periodic list": viaServer, "periodic pause": viaServer, "periodic resume": viaServer,
	"periodic remove": viaServer,

	"runs complete-step": viaServer,

	"relay status": viaServer, // relay_status.go

	"limits set": viaServer, "limits list": viaServer, "limits remove": viaServer, "limits": noBackend,

	"help": noBackend, "completion": noBackend, "version": noBackend,
	"config check": noBackend, "config show": noBackend, "bench ordering": noBackend,
	// Command groups: they only name their subcommands.
	"tasks": noBackend, "dlq": noBackend, "workers": noBackend, "queues": noBackend, "events": noBackend,
	"runs": noBackend, "workflows": noBackend, "tokens": noBackend, "config": noBackend, "redrives": noBackend,
	"leases": noBackend, "audit": noBackend, "periodic": noBackend,
}

// serverMode is how the command treats --server: viaServer, noBackend, or
// "" (works on the database only).
func serverMode(cmd *cobra.Command) string {
	path := strings.TrimPrefix(cmd.CommandPath(), "backstop ")
	if strings.HasPrefix(path, "completion ") || strings.HasPrefix(path, cobra.ShellCompRequestCmd) {
		return noBackend // the scripts, and cobra's hidden __complete the shell calls on TAB
	}
	return serverModes[path]
}

// checkServerMode refuses a database command when a server is named.
func (a *app) checkServerMode(cmd *cobra.Command) error {
	if a.server == "" || serverMode(cmd) != "" {
		return nil
	}
	return a.serverRefusal(strings.TrimPrefix(cmd.CommandPath(), "backstop "))
}

// serverRefusal says that what works on the database cannot go through
// --server, and how to run it anyway.
func (a *app) serverRefusal(what string) error {
	from := "--server " + a.server
	if !a.serverFlag {
		from = "--server (BACKSTOP_SERVER=" + a.server + ")"
	}
	return usageErr("%s works on the database (--db) and cannot go through a server, but %s is set: "+
		"unset it, or pass --server= to run it on --db", what, from)
}

// CommandPaths lists every command's path below the root ("dlq purge",
// "completion bash"), for tests that must cover each one.
func CommandPaths() []string {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			out = append(out, strings.TrimPrefix(sub.CommandPath(), "backstop "))
			walk(sub)
		}
	}
	walk(a.rootCmd())
	return out
}

// commands is filled by each command file's init, so files stay independent.
var commands []func(*app) *cobra.Command

func register(f func(*app) *cobra.Command) { commands = append(commands, f) }

// isCobraUsage recognises cobra's own argument errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "required flag", "invalid argument", "flag needs an argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// open opens the store named by --db, migrates it, and makes a client.
// Commands that work on the database only refuse --server (the flag or
// BACKSTOP_SERVER) rather than silently ignore it; PersistentPreRunE
// (checkServerMode) already did for the commands serverModes does not list.
func (a *app) open(ctx context.Context, cfg *backstop.Config) (store.Store, *backstop.Client, error) {
	if a.server != "" {
		return nil, nil, a.serverRefusal(a.via)
	}
	return a.openDB(ctx, cfg)
}

func (a *app) openDB(ctx context.Context, cfg *backstop.Config) (store.Store, *backstop.Client, error) {
	if cfg == nil {
		cfg = &backstop.Config{}
	}
	if cfg.Logger == nil {
		// JSON lines on stderr, like serve's and work's (telemetry), not
		// the slog default's text.
		cfg.Logger = slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: a.level(nil)}))
	}
	if cfg.MaxFanOutBytes == 0 {
		n, err := maxFanOutBytes()
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxFanOutBytes = n
	}
	if cfg.WorkerStaleAfter == 0 {
		d, err := workerStaleAfter()
		if err != nil {
			return nil, nil, err
		}
		cfg.WorkerStaleAfter = d
	}
	s, err := dburl.Open(ctx, a.dbURL)
	if err != nil {
		return nil, nil, err // exitCode tells a bad URL (2) from a failure (1)
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, nil, err
	}
	c, err := backstop.NewClient(s, cfg)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, c, nil
}

// json prints v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// print prints v as JSON with -o json, else calls table.
func (a *app) print(v any, table func(w io.Writer) error) error {
	if a.output == "json" {
		return a.printJSON(v)
	}
	return table(a.stdout)
}

// resolveLogLevel checks --log-level, or BACKSTOP_LOG_LEVEL when the flag
// is not given, and keeps the one that applies.
func (a *app) resolveLogLevel(cmd *cobra.Command) error {
	if cmd.Flags().Changed("log-level") {
		if _, err := config.ParseLogLevel(a.logLevel); err != nil {
			return usageErr("--log-level %v", err)
		}
		return nil
	}
	const name = config.EnvPrefix + "LOG_LEVEL"
	a.logLevel = os.Getenv(name)
	if _, err := config.ParseLogLevel(a.logLevel); err != nil {
		return usageErr("%s: %v", name, err)
	}
	return nil
}

// level is the log level of a command: --log-level or BACKSTOP_LOG_LEVEL,
// else cfg's log.level (nil: none), else info. Both were checked.
func (a *app) level(cfg *config.Config) slog.Level {
	s := a.logLevel
	if s == "" && cfg != nil {
		s = cfg.Log.Level
	}
	l, _ := config.ParseLogLevel(s)
	return l
}

// workerStaleAfter is workers.stale_after for the commands on --db that
// read the registry (envSettings; 0: the default).
func workerStaleAfter() (time.Duration, error) {
	c, err := envSettings("WORKERS_STALE_AFTER")
	if err != nil {
		return 0, err
	}
	return c.Workers.StaleAfter.D(), nil
}

// envSettings reads the named BACKSTOP_* variables (suffixes after the
// prefix) as the configuration reads them, for the commands that work on
// the database (--db): over --server the server's own configuration
// decides. A bad value is a usage error naming the variable or its key.
func envSettings(names ...string) (*config.Config, error) {
	var c config.Config
	var set []string
	for _, n := range names {
		name := config.EnvPrefix + n
		if v := os.Getenv(name); v != "" {
			set = append(set, name+"="+v)
		}
	}
	if err := c.ApplyEnv(set); err != nil {
		return nil, usageErr("%v", err)
	}
	if err := c.Validate(); err != nil {
		return nil, usageErr("%s: %v", strings.Join(set, " "), err)
	}
	return &c, nil
}

// maxFanOutBytes is limits.max_fanout_bytes (0: the library's default). A
// run started or advanced by a command on the database is bound as serve
// and work bind it.
func maxFanOutBytes() (int64, error) {
	c, err := envSettings("LIMITS_MAX_FANOUT_BYTES")
	if err != nil {
		return 0, err
	}
	return int64(c.Limits.MaxFanOutBytes), nil
}
