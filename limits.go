package backstop

import (
	"context"
	"log/slog"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// Limit is a cluster-wide limit on a queue, optionally one kind of it,
// optionally one budget per value of an attribute (Per): at most
// Concurrency of its tasks run at once, or (a rate limit) at most Rate of
// them start per second with bursts of Burst, across every process on the
// database (docs/limits.md).
type Limit = engine.Limit

// LimitStatus is a limit with how much of it is in use and how many tasks
// wait on it.
type LimitStatus = engine.LimitStatus

// ValidateLimit checks a limit as SetLimit does (a rate limit without a
// Burst takes the default, max(1, ceil(Rate))); a *ValidationError names
// the bad field.
func ValidateLimit(l Limit) error { return engine.ValidateLimit(engine.LimitDefaults(l)) }

// SetLimit creates the limit or replaces the one of that name (a rate
// limit without a Burst gets max(1, ceil(Rate))); it binds
// this client's claims at once and other processes' within a second.
// Tasks already running are not stopped when a limit is lowered: new
// claims wait until the running count is below it.
func (c *Client) SetLimit(ctx context.Context, l Limit, actor string) (Limit, error) {
	l = engine.LimitDefaults(l)
	if err := engine.ValidateLimit(l); err != nil {
		return Limit{}, err
	}
	if err := engine.CheckText("actor", actor); err != nil {
		return Limit{}, err
	}
	l.CreatedAt = c.now()
	actor = c.actor(actor)
	ev := c.auditEvent(ctx, store.EventLimitSet, l.Name, actor, map[string]any{
		"queue": l.Queue, "kind": l.Kind, "per": l.Per, "concurrency": l.Concurrency, "rate": l.Rate, "burst": l.Burst})
	if err := c.store.SetLimit(ctx, l, ev); err != nil {
		return Limit{}, err
	}
	c.e.LimitsChanged()
	c.cfg.Logger.Info("limit set", slog.String("limit", l.Name), slog.String("scope", engine.LimitScope(l)),
		slog.Int("concurrency", l.Concurrency), slog.Float64("rate", l.Rate), slog.Int("burst", l.Burst), slog.String("actor", actor))
	return l, nil
}

// RemoveLimit deletes the named limit; removed is false when there was
// none.
func (c *Client) RemoveLimit(ctx context.Context, name, actor string) (removed bool, err error) {
	if err := engine.ValidName(name); err != nil {
		return false, invalid("name", "%v", err)
	}
	actor = c.actor(actor)
	removed, err = c.store.RemoveLimit(ctx, name, c.auditEvent(ctx, store.EventLimitRemoved, name, actor, nil))
	if err == nil && removed {
		c.e.LimitsChanged()
		c.cfg.Logger.Info("limit removed", slog.String("limit", name), slog.String("actor", actor))
	}
	return removed, err
}

// Limits lists every limit with its use, by name.
func (c *Client) Limits(ctx context.Context) ([]LimitStatus, error) {
	return c.e.LimitStatuses(ctx)
}
