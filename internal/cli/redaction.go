package cli

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// redactKeys is the CLI's redaction key list: BACKSTOP_REDACTION_KEYS
// (comma-separated), added to the defaults as in the configuration file
// (docs/redaction.md).
func (a *app) redactKeys() []string {
	var keys []string
	for _, k := range strings.Split(os.Getenv("BACKSTOP_REDACTION_KEYS"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// addRawFlag adds --raw to a command that prints payloads.
func addRawFlag(a *app, cmd *cobra.Command) {
	cmd.Flags().BoolVar(&a.raw, "raw", false, "show payloads as stored instead of masked (admin; recorded in each task's history as task.payload_viewed)")
}
