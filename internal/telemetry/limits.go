package telemetry

import (
	"context"

	"github.com/backstophq/backstop/store"
)

// WithLimitWaiting adds, per limit, the pending tasks its full budgets
// hold back (waiting: the library's limit statuses, read at the engine's
// clock) to a store's gauge query: backstop_limit_waiting.
func WithLimitWaiting(r store.GaugeReader, waiting func(context.Context) (map[string]int, error)) store.GaugeReader {
	return limitReader{r, waiting}
}

type limitReader struct {
	store.GaugeReader
	waiting func(context.Context) (map[string]int, error)
}

func (r limitReader) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	snap, err := r.GaugeReader.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	if snap.LimitWaiting, err = r.waiting(ctx); err != nil {
		return nil, err
	}
	return snap, nil
}
