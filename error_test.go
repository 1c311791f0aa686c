package backstop

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassifyHTTPStatus(t *testing.T) {
	for code, want := range map[int]string{
		200: "ok", 204: "ok", 302: "ok",
		408: "transient", 429: "transient", 500: "transient", 502: "transient", 503: "transient",
		400: "permanent", 401: "permanent", 403: "permanent", 404: "permanent", 409: "permanent", 422: "permanent",
	} {
		err := ClassifyHTTPStatus(code)
		got := "transient"
		switch {
		case err == nil:
			got = "ok"
		case IsPermanent(err):
			got = "permanent"
		}
		if got != want {
			t.Errorf("status %d: %s, want %s (%v)", code, got, want, err)
		}
	}
}

func TestClassifyPostgresError(t *testing.T) {
	for code, permanent := range map[string]bool{
		"40001": false, // serialization_failure
		"40P01": false, // deadlock_detected
		"55P03": false, // lock_not_available
		"57014": false, // query_canceled (statement timeout)
		"53300": false, // too_many_connections
		"08006": false, // connection_failure
		"57P01": false, // admin_shutdown
		"23505": true,  // unique_violation
		"23503": true,  // foreign_key_violation
		"22P02": true,  // invalid_text_representation
		"42P01": true,  // undefined_table
	} {
		// Wrapped, as a handler would return it.
		err := ClassifyPostgresError(fmt.Errorf("update order: %w", &pgconn.PgError{Code: code}))
		if err == nil || IsPermanent(err) != permanent {
			t.Errorf("SQLSTATE %s: permanent=%v, want %v", code, IsPermanent(err), permanent)
		}
	}
	if ClassifyPostgresError(nil) != nil {
		t.Error("nil error classified as a failure")
	}
	if err := ClassifyPostgresError(errors.New("connection reset by peer")); err == nil || IsPermanent(err) {
		t.Errorf("network error: %v, want transient", err)
	}
}
