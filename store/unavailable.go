package store

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// ErrUnavailable marks a temporary store failure: the database is busy
// (another writer holds the lock past the busy timeout), its disk is full,
// or the connection to it was lost. Retrying later can succeed; nothing
// about the request was wrong. The HTTP API answers it 503 with
// Retry-After, the CLI exits 1 naming the cause.
var ErrUnavailable = errors.New("store temporarily unavailable")

// The causes an UnavailableError names.
const (
	CauseBusy           = "busy"
	CauseDiskFull       = "disk full"
	CauseConnectionLost = "connection lost"
	CauseShuttingDown   = "shutting down"
	CauseOverloaded     = "overloaded"
)

// UnavailableError is a temporary store failure and its cause (one of the
// Cause constants). It wraps ErrUnavailable and the driver's error.
type UnavailableError struct {
	Cause string
	Err   error
}

func (e *UnavailableError) Error() string {
	return "store unavailable (" + e.Cause + "): " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// A Classifier names the cause of a driver error that is temporary, or
// answers "" for any other error. Each driver registers one (its init):
// only the driver knows its error types.
type Classifier func(error) (cause string)

var (
	classifiersMu sync.RWMutex
	classifiers   []Classifier
)

// RegisterClassifier adds a driver's Classifier to the ones Classify asks.
func RegisterClassifier(c Classifier) {
	classifiersMu.Lock()
	defer classifiersMu.Unlock()
	classifiers = append(classifiers, c)
}

// Classify returns err as an *UnavailableError when a driver's classifier,
// or the network, says it is temporary; any other error (nil, a context's
// end, an error already classified) is returned as it is. This is the one
// place temporary failures are told apart: the HTTP API, the CLI and the
// retrying jobs all ask it.
func Classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	classifiersMu.RLock()
	cs := classifiers
	classifiersMu.RUnlock()
	for _, c := range cs {
		if cause := c(err); cause != "" {
			return &UnavailableError{Cause: cause, Err: err}
		}
	}
	if networkError(err) {
		return &UnavailableError{Cause: CauseConnectionLost, Err: err}
	}
	return err
}

// IsUnavailable reports whether err is a temporary store failure.
func IsUnavailable(err error) bool { return errors.Is(Classify(err), ErrUnavailable) }

// networkError: the connection to a database server broke or could not be
// made (any driver that talks over a socket).
func networkError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
