package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/relay"
)

func relayStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show each sink's undelivered messages and each event-log checkpoint's lag",
		Long: `status shows, per sink (the queue sink.<name>), the messages not delivered yet, how
long the oldest claimable one has waited (lag), the open dead letters and the newest error;
and per checkpoint and stream of the event-log relay (--streams), the events of the stream
after the checkpoint (counted up to 10000), the age of the oldest of them (lag), the events
published and the repeats the broker removed, the last error and when it last moved; and
per ingester (backstop ingest, serve's ingest: list; with --db) its group and topic, the
messages behind in the broker, how far behind in the broker's time (from the timestamp it
last reported, so it grows while the ingester is stuck or gone: see UPDATED), who reported
and the last enqueue error.
With --db or --server (GET /v1/relay); -o json prints the same document as the API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var st *relay.Status
			if a.server != "" {
				s, err := apiclient.New(a.server, a.token).RelayStatus(ctx)
				if err != nil {
					return remoteErr(err)
				}
				st = s
			} else {
				s, c, err := a.openDB(ctx, nil)
				if err != nil {
					return err
				}
				defer s.Close()
				if st, err = relay.ReadStatus(ctx, c); err != nil {
					return err
				}
			}
			return a.print(st, func(w io.Writer) error { return printRelayStatus(w, st) })
		},
	}
}

func printRelayStatus(w io.Writer, st *relay.Status) error {
	secs := func(s float64) string { return (time.Duration(s*1000) * time.Millisecond).String() }
	tw := newTable(w)
	fmt.Fprintln(tw, "SINK\tQUEUE\tPENDING\tLAG\tDEAD\tLAST ERROR")
	for _, s := range st.Sinks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", s.Sink, s.Queue, s.Pending, secs(s.LagSeconds), s.Dead, oneLine(s.LastError, 100))
	}
	if len(st.Sinks) == 0 {
		fmt.Fprintln(tw, "(no messages)")
	}
	fmt.Fprintln(tw, "\nCHECKPOINT\tSTREAM\tSINK\tBEHIND\tLAG\tPUBLISHED\tDUPLICATES\tUPDATED\tLAST ERROR")
	for _, c := range st.Checkpoints {
		behind := fmt.Sprint(c.EventsBehind)
		if c.EventsBehindCapped {
			behind += "+"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", c.Name, c.Stream, c.Sink, behind, secs(c.LagSeconds),
			c.Published, c.Duplicates, fmtTime(c.UpdatedAt), oneLine(c.LastError, 100))
	}
	if len(st.Checkpoints) == 0 {
		fmt.Fprintln(tw, "(no checkpoints)")
	}
	fmt.Fprintln(tw, "\nINGEST GROUP\tTOPIC\tQUEUE\tBEHIND\tLAG\tHOLDER\tUPDATED\tLAST ERROR")
	for _, in := range st.Ingesters {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", in.Group, in.Topic, in.Queue, in.LagMessages, secs(in.LagSeconds),
			in.Holder, fmtTime(in.UpdatedAt), oneLine(in.LastError, 100))
	}
	if len(st.Ingesters) == 0 {
		fmt.Fprintln(tw, "(no ingesters)")
	}
	return tw.Flush()
}
