package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/audit"
	"github.com/backstophq/backstop/store"
)

func init() { register(auditCmd) }

func auditCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the operators' actions (who did what, when, to what, why)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("audit: name a subcommand: list")
		},
	}
	cmd.AddCommand(auditListCmd(a))
	return cmd
}

func auditListCmd(a *app) *cobra.Command {
	var p audit.Params
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--actor A] [--type T,T] [--since S] [--until U] [--target ID]",
		Short: "List operator actions, oldest first, filtered by actor, type, time and target",
		Long: `list prints the operators' actions recorded in the event log's audit stream
(docs/events.md): queue pause and resume, token create and revoke, workflow
apply, run cancel and resume, task cancels, dead-letter replays, discards,
resolves and purges, payload views, lease-key rotation. Each line: cursor,
time, type, actor, target, reason.

--type takes one type or several, comma-separated; --since and --until take
an RFC 3339 time or an age back from now (90m, 24h, 7d); --after a cursor to
read behind. It prints up to --limit actions; when more may follow, the
cursor to continue from on stderr.`,
		Example: `  backstop audit list --since 24h
  backstop audit list --actor ci-deployer --type queue.paused,queue.resumed -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > audit.MaxLimit {
				return usageErr("--limit %d: must be between 1 and %d", limit, audit.MaxLimit)
			}
			p.Limit = fmt.Sprint(limit)
			q, err := audit.Parse(p, time.Now())
			if err != nil {
				return err
			}
			page, err := a.auditList(cmd.Context(), p, q)
			if err != nil {
				return err
			}
			if a.output == "table" && !page.Complete {
				fmt.Fprintf(a.stderr, "(more may follow: --after %s)\n", page.NextCursor)
			}
			return a.print(page, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "CURSOR\tTIME\tTYPE\tACTOR\tTARGET\tREASON")
				for _, e := range page.Items {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Cursor, fmtTime(e.Time), e.Type, e.Actor, e.Target, oneLine(e.Reason, 80))
				}
				return tw.Flush()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Actor, "actor", "", "only this actor (a token's name, cli:<user>, library)")
	f.StringVar(&p.Type, "type", "", "only these action types, comma-separated ("+strings.Join(store.AuditTypes, ", ")+")")
	f.StringVar(&p.Since, "since", "", "only actions at or after this time (RFC 3339, or an age: 24h, 7d)")
	f.StringVar(&p.Until, "until", "", "only actions before this time (RFC 3339, or an age)")
	f.StringVar(&p.Target, "target", "", "only actions on this target (a task, queue, token id, workflow or run)")
	f.StringVar(&p.After, "after", "", "read behind this cursor (a previous list's)")
	f.IntVar(&limit, "limit", 100, "at most this many actions (1-1000)")
	return cmd
}

// auditList reads up to q.Limit actions, on the database or with --server
// through GET /v1/audit (which reads the log in bounded slices: it asks
// again behind the answer's cursor until the page is full or the log's end
// is reached).
func (a *app) auditList(ctx context.Context, p audit.Params, q audit.Query) (audit.Page, error) {
	var read func(after string, limit int) (audit.Page, error)
	if a.server != "" {
		cl := apiclient.New(a.server, a.token)
		read = func(after string, limit int) (audit.Page, error) {
			v := url.Values{}
			for k, s := range map[string]string{"actor": p.Actor, "type": p.Type, "since": p.Since, "until": p.Until,
				"target": p.Target, "after": after, "limit": fmt.Sprint(limit)} {
				if s != "" {
					v.Set(k, s)
				}
			}
			page, err := cl.Audit(ctx, v)
			return page, remoteErr(err)
		}
	} else {
		s, c, err := a.openDB(ctx, nil)
		if err != nil {
			return audit.Page{}, err
		}
		defer s.Close()
		read = func(after string, limit int) (audit.Page, error) {
			q.After, q.Limit = after, limit
			return audit.List(ctx, c, q)
		}
	}
	out := audit.Page{Items: []audit.Entry{}, NextCursor: q.After}
	for {
		page, err := read(out.NextCursor, q.Limit-len(out.Items))
		if err != nil {
			return out, err
		}
		out.Items = append(out.Items, page.Items...)
		out.NextCursor, out.Complete = page.NextCursor, page.Complete
		if page.Complete || len(out.Items) >= q.Limit {
			return out, nil
		}
	}
}
