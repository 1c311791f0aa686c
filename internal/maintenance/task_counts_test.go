package maintenance_test

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/store/pgstore"
)

// TestTaskCounts: a round folds the deltas (PostgreSQL: none left) and the
// counts read the same; kept counts made wrong behind the store's back
// stay wrong until a reconciliation is due (CountsReconcileEvery after
// the first round, which does not count the tasks, then every
// CountsReconcileEvery), which corrects them, logs a warning and counts
// the correction. On SQLite the counts are the rows' and a round does
// nothing.
func TestTaskCounts(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		var logs testlog.Buffer
		reader := sdkmetric.NewManualReader()
		b := setup(t, db, &engine.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
		b.enqueue(engine.EnqueueParams{Queue: "q", Kind: "k"}, engine.EnqueueParams{Queue: "q", Kind: "k"},
			engine.EnqueueParams{Queue: "r", Kind: "k"})
		b.claim("r", 1, time.Minute)
		counts := func() map[string]map[bt.State]int {
			t.Helper()
			qs, err := b.s.CountByQueue(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]map[bt.State]int{}
			for _, q := range qs {
				out[q.Queue] = q.Counts
			}
			return out
		}
		want := map[string]map[bt.State]int{"q": {bt.StatePending: 2}, "r": {bt.StateRunning: 1}}
		svc := maintenance.NewTaskCounts(b.e, time.Second)
		pg, ok := b.s.(*pgstore.Store)
		if !ok {
			b.run(svc)
			same(t, "counts after a round", counts(), want)
			eq(t, "log", logs.String(), "")
			return
		}
		deltas := func() int {
			t.Helper()
			var n int
			if err := pg.Pool().QueryRow(b.ctx, `SELECT count(*) FROM backstop_task_count_deltas`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if _, err := pg.Pool().Exec(b.ctx, `INSERT INTO backstop_task_count_deltas VALUES ('ghost', 'pending', '', 3)`); err != nil {
			t.Fatal(err)
		}
		// The first round folds and does not count the tasks: a process
		// that starts leading does not read the whole table.
		b.run(svc)
		same(t, "ghost after the first round", counts()["ghost"], map[bt.State]int{bt.StatePending: 3})
		eq(t, "deltas after a round", deltas(), 0)
		b.clock.Advance(maintenance.CountsReconcileEvery - time.Second)
		b.run(svc)
		same(t, "ghost before the reconciliation is due", counts()["ghost"], map[bt.State]int{bt.StatePending: 3})
		eq(t, "log before", logs.String(), "")
		b.clock.Advance(time.Second)
		b.run(svc)
		same(t, "counts after the reconciliation", counts(), want)
		eq(t, "deltas after the reconciliation", deltas(), 0)
		if !strings.Contains(logs.String(), `"level":"WARN"`) || !strings.Contains(logs.String(), `"tasks":3`) {
			t.Fatalf("log: %s", logs.String())
		}
		same(t, "corrections", testmetric.Collect(t, reader)["backstop.task_count.corrections"], map[string]int64{"": 3})
	})
}

func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
