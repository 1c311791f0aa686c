package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
)

// requireReason is dlq.require_reason for the commands that work on the
// database (--db): BACKSTOP_DLQ_REQUIRE_REASON, read as the configuration
// reads it. Over --server the server's own configuration decides.
func requireReason() (bool, error) {
	const name = config.EnvPrefix + "DLQ_REQUIRE_REASON"
	v := os.Getenv(name)
	if v == "" {
		return false, nil
	}
	var c config.Config
	if err := c.ApplyEnv([]string{name + "=" + v}); err != nil {
		return false, usageErr("%v", err)
	}
	return c.DLQ.RequireReason, nil
}

// addReasonFlag adds the operator's reason flag (--reason, or --why on a
// redrive, whose --reason filters by the dead letters' reason).
func addReasonFlag(cmd *cobra.Command, name string, reason *string) {
	cmd.Flags().StringVar(reason, name, "", "why you do this, recorded with --actor in the task's history "+
		"(at most 1 KiB; required when dlq.require_reason is on)")
}

// checkReasonFlag checks the reason before anything is opened, so a bad
// one exits 2 naming the flag. Whether one is required is the library's
// (on --db) or the server's (on --server) to say.
func checkReasonFlag(flag, reason string) error {
	var ve *backstop.ValidationError
	if err := backstop.CheckReason(flag, reason, false); errors.As(err, &ve) {
		return usageErr("--%s %s", flag, ve.Message)
	} else if err != nil {
		return err
	}
	return nil
}
