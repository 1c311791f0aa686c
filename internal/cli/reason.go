package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
)

// requireReason is dlq.require_reason for the commands that work on the
// database (envSettings).
func requireReason() (bool, error) {
	c, err := envSettings("DLQ_REQUIRE_REASON")
	if err != nil {
		return false, err
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
