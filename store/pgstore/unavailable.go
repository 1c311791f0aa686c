package pgstore

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

func init() { store.RegisterClassifier(classify) }

// classify names the cause of a PostgreSQL error that is temporary
// (store.Classify): the server is shutting down or refuses connections
// (57P01-57P03), the connection broke (class 08, or pgconn's errors for a
// connection that closed or could not be made), its disk is full (53100),
// it is out of memory or connections (53200, 53300), or a lock timed out
// (55P03). Anything else (constraint, syntax, data errors) is "".
func classify(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch code := pe.Code; {
		case code == "53100":
			return store.CauseDiskFull
		case code == "57P01", code == "57P02", code == "57P03":
			return store.CauseShuttingDown
		case code == "53200", code == "53300":
			return store.CauseOverloaded
		case code == "55P03":
			return store.CauseBusy
		case strings.HasPrefix(code, "08"):
			return store.CauseConnectionLost
		}
		return ""
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return store.CauseConnectionLost
	}
	return ""
}
