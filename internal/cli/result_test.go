package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestWorkServerResultFile: `work --server` sends what its program wrote
// to $BACKSTOP_RESULT_FILE with the completion, and a result file that is
// not JSON fails the attempt permanently, naming the problem. The server's
// store is a real SQLite file under testdb.SettleRecorder: drivers do not
// write results, so the settle seam is where they are seen.
func TestWorkServerResultFile(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	var tok struct{ Secret string }
	e.json(&tok, "tokens", "create", "--name", "worker", "--role", "operator")
	s, err := dburl.Open(context.Background(), e.db)
	if err != nil {
		t.Fatal(err)
	}
	rec := testdb.RecordSettlements(s)
	url := apiServerOn(t, rec, &backstop.Config{}, api.Options{})
	e.ok("enqueue", "--queue", "rq", "--kind", "k", "--id", "good")
	e.ok("enqueue", "--queue", "rq", "--kind", "k", "--id", "bad", "--max-attempts", "5")
	prog := `if [ "$BACKSTOP_TASK_ID" = good ]; then echo '{"sum": 3}' > "$BACKSTOP_RESULT_FILE"; else echo nope > "$BACKSTOP_RESULT_FILE"; fi`
	if got := e.run("", "--server", url, "--token", tok.Secret, "work", "--queue", "rq", "--exit-after-idle", "300ms",
		"--", "sh", "-c", prog); got.code != 0 {
		t.Fatalf("work --server: %+v", got)
	}
	good, bad := rec.Of("good"), rec.Of("bad")
	if len(good) != 1 || good[0].Outcome != bt.OutcomeSucceeded || string(good[0].Result) != `{"sum":3}` {
		t.Errorf("good: %+v, want one success carrying the result file's JSON", good)
	}
	if len(bad) != 1 || bad[0].State != bt.StateDead || bad[0].DeadReason != bt.ReasonPermanentError ||
		!strings.Contains(bad[0].Error, execworker.ResultFileEnv) || bad[0].Result != nil {
		t.Errorf("bad: %+v, want one permanent dead letter naming %s", bad, execworker.ResultFileEnv)
	}
}
