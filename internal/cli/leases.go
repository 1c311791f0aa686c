package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
)

func init() { register(leasesCmd) }

func leasesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "The remote workers' lease tokens (rotate-key)",
		Long: `A remote worker proves it holds a lease with the lease token its claim answered: the
attempt's execution id signed with a key every process on the database shares (docs/api.md,
"Worker protocol"). Rotate that key when a token or the database's copy of it may have leaked.`,
	}
	cmd.AddCommand(leasesRotateKeyCmd(a))
	return cmd
}

// rotatedJSON is what rotate-key prints with -o json.
type rotatedJSON struct {
	Rotated           bool      `json:"rotated"`
	Grace             string    `json:"grace"`
	PreviousGoodUntil time.Time `json:"previous_good_until"`
}

func leasesRotateKeyCmd(a *app) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "rotate-key [--grace 1h]",
		Short: "Sign new lease tokens with a fresh key; the old key's tokens stay good for --grace",
		Long: `Replace the key that signs remote workers' lease tokens with a fresh random one. The tokens
the old key signed (the leases held now) stay good for --grace; after it a worker still holding one
gets 409 lease_not_current, stops, and its attempt is retried when its lease expires. Every serve and
work process on the database signs with the new key within 30 seconds, and reads it at once when a
token signed with it reaches it first. Run it against the database (admin), not through --server.`,
		Example: `  backstop leases rotate-key --grace 30m`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 || grace > backstop.MaxLeaseKeyGrace {
				return usageErr("--grace %s: use 0s to %s", grace, backstop.MaxLeaseKeyGrace)
			}
			s, c, err := a.open(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer s.Close()
			until, err := c.RotateLeaseKey(cliActor(cmd.Context()), grace)
			if err != nil {
				return err
			}
			out := rotatedJSON{Rotated: true, Grace: grace.String(), PreviousGoodUntil: until.UTC()}
			return a.print(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "rotated the lease token key: the previous key's tokens stay good until %s (grace %s)\n",
					until.UTC().Format(time.RFC3339), grace)
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", time.Hour, "how long the tokens the previous key signed stay good (0s to 168h)")
	return cmd
}
