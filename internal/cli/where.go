package cli

import (
	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/filter"
)

// registerWhere adds --where EXPR: a CEL condition on the payload and
// attributes (internal/filter; docs/api.md).
func registerWhere(cmd *cobra.Command, where *string, what string) {
	cmd.Flags().StringVar(where, "where", "", "only "+what+" whose payload and attributes match this CEL condition, "+
		`e.g. 'payload.customer.id == 42 && attributes.tenant == "acme"' (docs/api.md, Filtering by payload)`)
}

// checkWhereFlag compiles --where before anything is opened: a bad
// expression is a usage error (exit 2) naming CEL's position.
func checkWhereFlag(w string) (string, error) {
	if w == "" {
		return "", nil
	}
	if _, err := filter.Compile(w); err != nil {
		return "", usageErr("--where: %v", err)
	}
	return w, nil
}
