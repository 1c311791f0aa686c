package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/taskjson"
)

// readRunBatch decodes every run object of an NDJSON input, with the line
// each came from (blank lines skipped); a record without "workflow" takes
// name.
func readRunBatch(r io.Reader, name string) ([]backstop.RunWorkflowParams, []int, error) {
	return readNDJSON(r, func(line []byte) (backstop.RunWorkflowParams, error) {
		p, err := taskjson.DecodeRun(line)
		if err == nil && p.Workflow == "" {
			p.Workflow = name
		}
		return p, err
	})
}

// startRunBatch is `workflows run --batch-file`: the file's runs started
// batchSize at a time (RunWorkflows, or POST /v1/runs/batch), after the
// whole file was checked.
func (a *app) startRunBatch(ctx context.Context, file, name string) error {
	r, closeFn, err := a.openInput(file, "--batch-file")
	if err != nil {
		return err
	}
	ps, lines, err := readRunBatch(r, name)
	closeFn()
	if err != nil {
		return err
	}
	atLine := func(i int, err error) error {
		return &exitError{code: exitCode(err), err: fmt.Errorf("line %d: %w", lines[i], err)}
	}
	// The runs are started by the library on the database, or by the
	// server (which checks each request's records itself).
	var (
		start  func([]backstop.RunWorkflowParams) ([]backstop.RunStarted, error)
		check  = backstop.CheckRuns
		lookup func(name string, version int) error // registered?
	)
	if a.server != "" {
		client := apiclient.New(a.server, a.token)
		start = func(ps []backstop.RunWorkflowParams) ([]backstop.RunStarted, error) {
			rs, err := client.RunWorkflows(ctx, ps)
			return rs, remoteErr(err)
		}
		lookup = func(name string, version int) error {
			_, err := client.Workflow(ctx, name, version)
			return remoteErr(err)
		}
	} else {
		cfg, stop, err := a.traced(ctx, nil)
		if err != nil {
			return err
		}
		defer stop()
		s, c, err := a.openDB(ctx, cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		start = func(ps []backstop.RunWorkflowParams) ([]backstop.RunStarted, error) {
			return c.RunWorkflows(cliActor(ctx), ps)
		}
		check = c.ValidateRuns
		lookup = func(name string, version int) error { // on the database already open
			_, _, err := c.Workflow(ctx, name, version)
			return err
		}
	}
	// The whole file before any run is written: each record's values, a
	// run id twice in the file (across the batches it is split into),
	// every workflow and version it names registered.
	for first := 0; first < len(ps); first += batchSize {
		if err := check(ps[first:min(first+batchSize, len(ps))]...); err != nil {
			var be *backstop.BatchError
			if errors.As(err, &be) {
				return atLine(first+be.Index, be.Err)
			}
			return err
		}
	}
	seen := map[string]int{}
	for i, p := range ps {
		if p.RunID == "" {
			continue
		}
		if first, dup := seen[p.RunID]; dup {
			return &exitError{code: ExitUsage, err: fmt.Errorf("line %d: run_id: %q is also on line %d (a run id may be given once)", lines[i], p.RunID, first)}
		}
		seen[p.RunID] = lines[i]
	}
	type wv struct {
		name    string
		version int
	}
	registered := map[wv]bool{}
	for i, p := range ps {
		k := wv{p.Workflow, p.Version}
		if registered[k] {
			continue
		}
		if err := lookup(p.Workflow, p.Version); err != nil {
			return atLine(i, err)
		}
		registered[k] = true
	}

	var out []backstop.RunStarted
	for first := 0; first < len(ps); first += batchSize {
		end := min(first+batchSize, len(ps))
		rs, err := start(ps[first:end])
		if err != nil {
			written := ""
			if first > 0 {
				written = fmt.Sprintf("; the %d runs before line %d were started", first, lines[first])
			}
			var be *backstop.BatchError
			if errors.As(err, &be) {
				return &exitError{code: exitCode(be.Err), err: fmt.Errorf("line %d: %w%s", lines[first+be.Index], be.Err, written)}
			}
			return &exitError{code: exitCode(err),
				err: fmt.Errorf("lines %d-%d not started: %w%s", lines[first], lines[end-1], err, written)}
		}
		out = append(out, rs...)
	}
	if out == nil {
		out = []backstop.RunStarted{}
	}
	return a.print(out, func(w io.Writer) error {
		for _, r := range out {
			if _, err := fmt.Fprintln(w, r.RunID); err != nil {
				return err
			}
		}
		return nil
	})
}
