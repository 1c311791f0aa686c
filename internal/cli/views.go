package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

func joinViews() string {
	names := make([]string, len(store.Views))
	for i, v := range store.Views {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// listView prints one operator view (seed 002): `tasks list --view V`.
// Filters other than --limit do not apply to views.
func (a *app) listView(cmd *cobra.Command, view string, limit int) error {
	for _, name := range []string{"queue", "kind", "attr", "after", "state"} {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			return usageErr("--view %s: --%s does not apply to views (only --limit does)", view, name)
		}
	}
	if a.server != "" {
		return usageErr("--view is not available over --server yet: the API has no view endpoint")
	}
	if limit < 1 || limit > 10000 {
		return usageErr("--limit %d: must be between 1 and 10000", limit)
	}
	s, c, err := a.open(cmd.Context(), nil)
	if err != nil {
		return err
	}
	defer s.Close()
	tasks, err := c.ListView(cmd.Context(), backstop.View(view), limit)
	if err != nil {
		return err
	}
	views := make([]taskJSON, len(tasks))
	for i, t := range tasks {
		views[i] = newTaskJSON(t, false)
	}
	return a.print(views, func(w io.Writer) error {
		tw := newTable(w)
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPT\tRUN_AT\tREASON\tLAST_ERROR")
		for _, t := range tasks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", t.ID, t.Queue, t.Kind, t.State,
				t.Attempt, t.MaxAttempts, fmtTime(t.RunAt), string(t.DeadReason), oneLine(t.LastError, 60))
		}
		return tw.Flush()
	})
}
