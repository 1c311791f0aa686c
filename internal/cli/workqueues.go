package cli

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
)

// queueSettings is one queue's concurrency and lease for `backstop work`.
type queueSettings struct {
	concurrency int
	lease       time.Duration
}

// perQueueSettings gives each --queue its own settings: the flag when it
// was set on the command line (or by BACKSTOP_*), else the queue's section
// of the configuration, else the flag's default.
func perQueueSettings(o *workOptions, cfg *config.Config, leaseSet, concurrencySet bool) map[string]queueSettings {
	out := make(map[string]queueSettings, len(o.queues))
	for _, name := range o.queues {
		s := queueSettings{concurrency: o.concurrency, lease: o.lease}
		if q, ok := cfg.Queues[name]; ok {
			if !leaseSet && q.Lease != 0 {
				s.lease = q.Lease.D()
			}
			if !concurrencySet && q.Concurrency != 0 {
				s.concurrency = q.Concurrency
			}
		}
		out[name] = s
	}
	return out
}

// settings returns a queue's settings (the flags when workConfig did not
// run, as in tests that build options by hand).
func (o *workOptions) settings(queue string) queueSettings {
	if s, ok := o.perQueue[queue]; ok {
		return s
	}
	return queueSettings{concurrency: o.concurrency, lease: o.lease}
}

func (o *workOptions) checkQueues() error {
	for _, q := range o.queues {
		s := o.settings(q)
		if s.concurrency < 1 {
			return usageErr("work: queue %s: concurrency must be at least 1", q)
		}
		if s.lease < time.Second {
			return usageErr("work: queue %s: lease %s is shorter than 1s", q, s.lease)
		}
	}
	return nil
}

type leaseGroup struct {
	lease  time.Duration
	queues map[string]int
}

// leaseGroups groups the queues by lease, shortest first.
func leaseGroups(o *workOptions) []leaseGroup {
	by := map[time.Duration]map[string]int{}
	for _, q := range o.queues {
		s := o.settings(q)
		if by[s.lease] == nil {
			by[s.lease] = map[string]int{}
		}
		by[s.lease][q] = s.concurrency
	}
	out := make([]leaseGroup, 0, len(by))
	for l, qs := range by {
		out = append(out, leaseGroup{lease: l, queues: qs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lease < out[j].lease })
	return out
}

// workers are the library Workers of one `backstop work`.
type workers []*backstop.Worker

func (ws workers) ID() string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.ID()
	}
	return strings.Join(ids, ",")
}

func (ws workers) IdleFor() time.Duration {
	var d time.Duration = -1
	for _, w := range ws {
		if x := w.IdleFor(); d < 0 || x < d {
			d = x
		}
	}
	return d
}

func (ws workers) Running() int {
	n := 0
	for _, w := range ws {
		n += w.Running()
	}
	return n
}

// empty is ready once every worker's queues have run dry (Worker.Empty);
// nil (never ready) when they do not watch for it. Its watcher ends with
// stop.
func (ws workers) empty(stop <-chan struct{}) <-chan struct{} {
	if len(ws) == 1 {
		return ws[0].Empty()
	}
	out := make(chan struct{})
	for _, w := range ws {
		if w.Empty() == nil {
			return nil
		}
	}
	go func() {
		for _, w := range ws {
			select {
			case <-w.Empty():
			case <-stop:
				return
			}
		}
		close(out)
	}()
	return out
}

// stop drains them together, within the one grace period.
func (ws workers) stop(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
