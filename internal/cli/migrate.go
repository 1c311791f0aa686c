package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/store"
)

func init() { register(migrateCmd) }

// migrationJSON is one schema version as the CLI prints it.
type migrationJSON struct {
	Version   int64      `json:"version"`
	Name      string     `json:"name"`
	State     string     `json:"state"` // applied or pending
	AppliedAt *time.Time `json:"applied_at"`
}

func newMigrationJSON(m store.Migration) migrationJSON {
	v := migrationJSON{Version: m.Version, Name: m.Name, State: "pending", AppliedAt: m.AppliedAt}
	if m.AppliedAt != nil {
		v.State = "applied"
	}
	return v
}

func migrateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending schema migrations to --db",
		Long: "Apply the schema migrations embedded in this binary that --db lacks, and print them.\n" +
			"Every other command also migrates on open; this one makes it explicit (deploy steps).\n" +
			"A database migrated by a newer backstop (schema version ahead of this binary) is refused\n" +
			"by every command, this one included: exit 1, naming both versions; run the newer binary.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			before, err := s.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			if err := s.Migrate(ctx); err != nil {
				return err
			}
			// A fair queue's index is the schema owner's to make: one set by
			// a role that could not make it (or before fair indexes) gets it
			// here.
			if fi, ok := s.(interface{ EnsureFairIndexes(context.Context) error }); ok {
				if err := fi.EnsureFairIndexes(ctx); err != nil {
					return err
				}
			}
			after, err := s.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			wasApplied := map[int64]bool{}
			for _, m := range before {
				wasApplied[m.Version] = m.AppliedAt != nil
			}
			out := struct {
				Driver  string          `json:"driver"`
				Applied []migrationJSON `json:"applied"`
				Version int64           `json:"version"`
			}{Driver: s.Driver(), Applied: []migrationJSON{}}
			for _, m := range after {
				if m.AppliedAt == nil {
					continue
				}
				out.Version = max(out.Version, m.Version)
				if !wasApplied[m.Version] {
					out.Applied = append(out.Applied, newMigrationJSON(m))
				}
			}
			return a.print(out, func(w io.Writer) error {
				for _, m := range out.Applied {
					fmt.Fprintf(w, "applied %d %s\n", m.Version, m.Name)
				}
				if len(out.Applied) == 0 {
					fmt.Fprintf(w, "%s schema is up to date (version %d)\n", out.Driver, out.Version)
				} else {
					fmt.Fprintf(w, "%s schema is at version %d\n", out.Driver, out.Version)
				}
				return nil
			})
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show each schema migration and whether --db has it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			ms, err := s.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			views := make([]migrationJSON, len(ms))
			for i, m := range ms {
				views[i] = newMigrationJSON(m)
			}
			return a.print(views, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED_AT")
				for _, m := range views {
					at := "pending"
					if m.AppliedAt != nil {
						at = fmtTime(*m.AppliedAt)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\n", m.Version, m.Name, at)
				}
				return tw.Flush()
			})
		},
	})
	return cmd
}

// openStore opens --db without migrating it.
func (a *app) openStore(ctx context.Context) (store.Store, error) {
	s, err := dburl.Open(ctx, a.dbURL)
	if err != nil {
		return nil, err // exitCode tells a bad URL (2) from a failure (1)
	}
	return s, nil
}
