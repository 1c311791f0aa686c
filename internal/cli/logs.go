package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// logsFollowPoll is how often --follow looks for new lines.
const logsFollowPoll = 500 * time.Millisecond

func (l localBackend) Logs(ctx context.Context, taskID, executionID string, after, limit int) ([]backstop.LogLine, error) {
	return l.ReadLogs(ctx, taskID, executionID, after, limit)
}

func (r *remoteBackend) Logs(ctx context.Context, taskID, executionID string, after, limit int) ([]backstop.LogLine, error) {
	p, err := r.cl.Logs(ctx, taskID, executionID, after, limit)
	if err != nil {
		return nil, remoteErr(err)
	}
	return p.Items, nil
}

// logReader is the part of a backend `tasks logs` needs.
type logReader interface {
	Show(ctx context.Context, id string, win backstop.ExecutionWindow) (*backstop.Task, backstop.ExecutionsPage, []bt.Event, error)
	Logs(ctx context.Context, taskID, executionID string, after, limit int) ([]backstop.LogLine, error)
}

// execDone reports whether the execution has ended (or is unknown).
func execDone(t *backstop.Task, executionID string) bool {
	if t.State == bt.StateRunning && t.ExecutionID == executionID {
		return false
	}
	return true
}

func tasksLogsCmd(a *app) *cobra.Command {
	var (
		execution string
		follow    bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print an execution's log (default: the latest attempt)",
		Long: `Print the log of one execution of a task: what its handler logged (backstop.Logger,
backstop.WriteLog) or, for backstop work, the program's stdout and stderr. An execution keeps
at most 1000 lines or 256 KiB, then one truncation marker. --execution picks an attempt
(see tasks show); the default is the running or latest one. --follow keeps printing new
lines until the attempt ends (or Ctrl-C). With -o json each line is one JSON object
(seq, at, stream, line) per output line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.backend(ctx, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			t, _, _, err := c.Show(ctx, args[0], backstop.ExecutionWindow{Limit: 1})
			if err != nil {
				return err
			}
			if execution == "" {
				switch {
				case t.State == bt.StateRunning && t.ExecutionID != "":
					execution = t.ExecutionID
				case len(t.Executions) > 0:
					execution = t.Executions[len(t.Executions)-1].ExecutionID
				default:
					return &exitError{code: ExitNotFound, err: fmt.Errorf("task %q has no executions yet", t.ID)}
				}
			}
			return a.printLogs(ctx, c, t.ID, execution, follow)
		},
	}
	cmd.Flags().StringVar(&execution, "execution", "", "the execution (attempt) id; default: the running or latest one")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the attempt ends")
	return cmd
}

func (a *app) printLogs(ctx context.Context, c logReader, taskID, executionID string, follow bool) error {
	enc := json.NewEncoder(a.stdout)
	after := 0
	for {
		lines, err := c.Logs(ctx, taskID, executionID, after, 1000)
		if err != nil {
			if ctx.Err() != nil && follow {
				return nil
			}
			return err
		}
		for _, l := range lines {
			if a.output == "json" {
				if err := enc.Encode(l); err != nil {
					return err
				}
			} else if _, err := fmt.Fprintln(a.stdout, l.Line); err != nil {
				return err
			}
			after = l.Seq
		}
		if len(lines) == 1000 {
			continue
		}
		if !follow {
			return nil
		}
		t, _, _, err := c.Show(ctx, taskID, backstop.ExecutionWindow{Limit: 1})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if execDone(t, executionID) {
			// One last read: lines flushed just before the attempt ended.
			lines, err := c.Logs(ctx, taskID, executionID, after, 10000)
			if err != nil {
				return err
			}
			for _, l := range lines {
				if a.output == "json" {
					_ = enc.Encode(l)
				} else {
					fmt.Fprintln(a.stdout, l.Line)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logsFollowPoll):
		}
	}
}
