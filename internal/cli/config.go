package cli

import (
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/backstophq/backstop/internal/config"
)

func init() { register(configCmd) }

func configCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check or show the configuration (YAML file plus BACKSTOP_* variables)",
		Long: `Backstop reads a YAML file (--config FILE on serve and work) and BACKSTOP_*
environment variables; the environment wins over the file and flags win over both.
Every knob, its default and its variable are in docs/configuration.md.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a configuration file (with the environment applied); exit 2 naming the bad key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.loadConfig(args[0]); err != nil {
				return err
			}
			_, err := a.stdout.Write([]byte("ok: " + args[0] + "\n"))
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show [FILE]",
		Short: "Print the effective configuration: defaults, then FILE, then the environment (YAML; JSON with -o json)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			c, err := a.loadConfig(path)
			if err != nil {
				return err
			}
			eff := c.Effective()
			if a.output == "json" {
				return a.printJSON(eff)
			}
			enc := yaml.NewEncoder(a.stdout)
			enc.SetIndent(2)
			if err := enc.Encode(eff); err != nil {
				return err
			}
			return enc.Close()
		},
	})
	return cmd
}

// loadConfig reads the file (path "" for none) and the environment; any
// problem is a usage error (exit 2) naming the key.
func (a *app) loadConfig(path string) (*config.Config, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: err}
	}
	return c, nil
}
