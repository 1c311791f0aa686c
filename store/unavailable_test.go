package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestClassify: broken sockets are temporary for any driver; a context's
// end, plain errors and the sentinels are not; an error already classified
// keeps its cause; the cause shows in the message.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err   error
		cause string
	}{
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), store.CauseConnectionLost},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, store.CauseConnectionLost},
		{fmt.Errorf("write: %w", syscall.EPIPE), store.CauseConnectionLost},
		{&store.UnavailableError{Cause: store.CauseDiskFull, Err: errors.New("full")}, store.CauseDiskFull},
		{fmt.Errorf("wrapped: %w", context.Canceled), ""},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), ""},
		{store.ErrNotFound, ""},
		{errors.New("syntax error"), ""},
	} {
		err := store.Classify(c.err)
		var ue *store.UnavailableError
		got := ""
		if errors.As(err, &ue) {
			got = ue.Cause
		}
		if got != c.cause || store.IsUnavailable(c.err) != (c.cause != "") || !errors.Is(err, c.err) {
			t.Errorf("Classify(%v) = %v (cause %q), want cause %q", c.err, err, got, c.cause)
		}
		if c.cause != "" && err.Error() != "store unavailable ("+c.cause+"): "+ue.Err.Error() {
			t.Errorf("message %q", err)
		}
	}
	if store.Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
}
