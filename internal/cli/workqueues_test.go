package cli

import (
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/config"
)

// TestWorkPerQueueSettings: each --queue takes its own concurrency and
// lease from the configuration (not the first queue's for all), flags
// set on the command line win, and queues are grouped by lease.
func TestWorkPerQueueSettings(t *testing.T) {
	cfg, err := config.Parse([]byte("queues:\n  a:\n    concurrency: 2\n    lease: 10s\n  b:\n    concurrency: 7\n    lease: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := &workOptions{queues: []string{"a", "b", "c"}, concurrency: 10, lease: 30 * time.Second}
	o.perQueue = perQueueSettings(o, cfg, false, false)
	for q, want := range map[string]queueSettings{"a": {2, 10 * time.Second}, "b": {7, time.Minute}, "c": {10, 30 * time.Second}} {
		if got := o.settings(q); got != want {
			t.Errorf("queue %s: %+v, want %+v", q, got, want)
		}
	}
	if got := fmt.Sprint(leaseGroups(o)); got != "[{10000000000 map[a:2]} {30000000000 map[c:10]} {60000000000 map[b:7]}]" {
		t.Errorf("lease groups: %s", got)
	}
	o.perQueue = perQueueSettings(o, cfg, true, false) // --lease given
	if got := fmt.Sprint(leaseGroups(o)); got != "[{30000000000 map[a:2 b:7 c:10]}]" {
		t.Errorf("lease groups with --lease: %s", got)
	}
	o.perQueue = perQueueSettings(o, cfg, false, true) // --concurrency given
	if got := o.settings("b"); got.concurrency != 10 || got.lease != time.Minute {
		t.Errorf("b with --concurrency: %+v", got)
	}
	o.perQueue["a"] = queueSettings{concurrency: 1, lease: 500 * time.Millisecond}
	if err := o.checkQueues(); err == nil || exitCode(err) != ExitUsage {
		t.Errorf("a lease under 1s: %v", err)
	}
}
