package engine

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// Sentinel errors; every error the library returns wraps one of them where it
// applies, so callers (and the CLI's exit codes) can use errors.Is.
var (
	ErrNotFound = store.ErrNotFound
	ErrConflict = store.ErrConflict
	// ErrInvalid marks bad input; nothing was written.
	ErrInvalid = errors.New("invalid input")
	// ErrTooLarge marks input refused for its size (an oversize payload);
	// such errors also wrap ErrInvalid.
	ErrTooLarge = errors.New("too large")
)

// ValidationError names the field that is wrong and why.
type ValidationError struct {
	Field   string
	Message string
	// TooLarge: refused for its size; the error then also wraps ErrTooLarge.
	TooLarge bool
	// Cause, when set, is wrapped too (a spent where budget).
	Cause error
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func (e *ValidationError) Unwrap() []error {
	out := []error{ErrInvalid}
	if e.TooLarge {
		out = append(out, ErrTooLarge)
	}
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	return out
}

// Invalid is a ValidationError naming field.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// permanentError marks a failure that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the task goes to the dead-letter queue at once
// instead of being retried.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent error")
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// poisonError marks a task that can never be handled (its payload does not
// decode). It dead-letters with reason poison.
type poisonError struct{ err error }

func (e *poisonError) Error() string { return "poison: " + e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// retryAfterError asks to run the task again after a delay; not a failure.
type retryAfterError struct{ d time.Duration }

func (e *retryAfterError) Error() string { return fmt.Sprintf("retry after %s", e.d) }

// RetryAfter, returned by a handler, runs the task again after d without
// counting the attempt as a failure (it is recorded as "snoozed").
func RetryAfter(d time.Duration) error {
	return &retryAfterError{d: max(d, 0)}
}

// ClassifyHTTPStatus turns an HTTP response status into a handler result:
// nil for 2xx/3xx, a transient error for 408, 429 and 5xx, a permanent one
// for the other 4xx.
func ClassifyHTTPStatus(code int) error {
	switch {
	case code < 400:
		return nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return fmt.Errorf("http status %d %s (transient)", code, http.StatusText(code))
	default:
		return Permanent(fmt.Errorf("http status %d %s", code, http.StatusText(code)))
	}
}

// sqlStateError is what pgx's *pgconn.PgError (and lib/pq's) expose.
type sqlStateError interface{ SQLState() string }

// ClassifyPostgresError marks err permanent unless Postgres says retrying can
// help: serialization failures, deadlocks, lock timeouts, too many
// connections, shutdowns and connection failures stay transient, as do
// errors without an SQLSTATE (network). Constraint violations, syntax and
// data errors become permanent.
func ClassifyPostgresError(err error) error {
	if err == nil {
		return nil
	}
	var se sqlStateError
	if !errors.As(err, &se) {
		return err
	}
	code := se.SQLState()
	switch {
	case code == "40001", code == "40P01", code == "55P03", code == "57014",
		code == "53300", code == "57P01", code == "57P02", code == "57P03":
		return err
	case len(code) == 2+3 && (code[:2] == "08" || code[:2] == "53" || code[:2] == "58"):
		return err // connection exceptions, insufficient resources, system errors
	case len(code) == 5 && (code[:2] == "23" || code[:2] == "22" || code[:2] == "42"):
		return Permanent(err)
	}
	return err
}

// ErrWhereBudget marks a call whose where, evaluated in Go, spent its
// budget (Config.WhereCost, Config.WhereTime): the error also wraps
// ErrInvalid and names where and the budget; for a redrive, the batch
// that spent it.
var ErrWhereBudget = filter.ErrBudget

// The defaults of Config.WhereCost and Config.WhereTime.
const (
	DefaultWhereCost = filter.DefaultCost
	DefaultWhereTime = filter.DefaultTime
)

// WhereErr is err, a spent where budget as bad input: ErrInvalid naming
// where (and ErrWhereBudget).
func WhereErr(err error) error {
	var be *filter.BudgetError
	if err == nil || !errors.As(err, &be) {
		return err
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return err
	}
	return &ValidationError{Field: "where", Message: be.Error(), Cause: be}
}

// Poison marks err as a task that can never be handled (its payload does
// not decode): it is dead-lettered at once, reason poison.
func Poison(err error) error { return &poisonError{err: err} }

// IsPoison reports whether err was marked Poison.
func IsPoison(err error) bool {
	var p *poisonError
	return errors.As(err, &p)
}
