package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

func init() { register(tokensCmd) }

func tokensCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Manage API tokens (create, list, revoke)",
		Long: `API tokens authenticate calls to backstop serve. A token has a role: viewer (reads, payloads
redacted), operator (also enqueue, cancel and the remote worker protocol) or admin (everything).
Only a hash of each secret is stored: the secret is shown once, by create.`,
	}
	cmd.AddCommand(tokensCreateCmd(a), tokensListCmd(a), tokensRevokeCmd(a))
	return cmd
}

func (a *app) tokenStore(ctx context.Context) (store.Store, store.Tokens, error) {
	s, _, err := a.open(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return s, s.(store.Tokens), nil
}

// tokenJSON is a token as the CLI prints it; the secret only on create.
type tokenJSON struct {
	store.Token
	Secret string `json:"secret,omitempty"`
}

func tokensCreateCmd(a *app) *cobra.Command {
	var name, role string
	cmd := &cobra.Command{
		Use:     "create --name NAME --role viewer|operator|admin",
		Short:   "Create a token and print its secret (shown only this once)",
		Example: `  backstop tokens create --name ci-producer --role operator`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usageErr("--name is required")
			}
			r, err := api.ParseRole(role)
			if err != nil {
				return usageErr("--role %q: use viewer, operator or admin", role)
			}
			s, ts, err := a.tokenStore(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			secret, t, err := api.CreateToken(cliActor(cmd.Context()), ts, name, r, time.Now())
			if err != nil {
				return err
			}
			return a.print(tokenJSON{Token: t, Secret: secret}, func(w io.Writer) error {
				fmt.Fprintln(w, secret)
				fmt.Fprintf(a.stderr, "token %s (%s, %s) created; store the secret now, it cannot be shown again\n", t.Name, t.ID, t.Role)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the token (recorded as the actor of its calls)")
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator or admin")
	return cmd
}

func tokensListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, ts, err := a.tokenStore(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			list, err := ts.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(list, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tLAST USED\tREVOKED")
				for _, t := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, fmtTime(t.CreatedAt),
						fmtTimePtr(t.LastUsedAt), fmtTimePtr(t.RevokedAt))
				}
				return tw.Flush()
			})
		},
	}
}

func tokensRevokeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID|NAME",
		Short: "Revoke a token; calls with it get 401 from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, ts, err := a.tokenStore(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			ctx, now := cliActor(cmd.Context()), time.Now()
			t, err := ts.RevokeToken(ctx, args[0], now, func(t store.Token) bt.Event {
				return store.TokenEvent(ctx, now.UTC(), store.EventTokenRevoked, t)
			})
			if err != nil {
				return err
			}
			return a.print(t, func(w io.Writer) error {
				fmt.Fprintf(w, "revoked %s (%s)\n", t.ID, t.Name)
				return nil
			})
		},
	}
}
