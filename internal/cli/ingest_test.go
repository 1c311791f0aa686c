package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/testdb"
)

// Bad ingest flags exit 2 naming the problem, before anything is opened:
// no database file is created, no broker is dialled.
func TestIngestBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "never.db")
	e := &cliEnv{t: t, db: db}
	k := []string{"ingest", "--from", "kafka://127.0.0.1:1", "--topic", "t", "--queue", "q", "--kind", "k"}
	n := []string{"ingest", "--from", "nats://127.0.0.1:1", "--subject", "s", "--queue", "q", "--kind", "k"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{with(k, "--id-field", "a", "--id-header", "h"), "not both"},
		{[]string{"ingest", "--from", "kafka://127.0.0.1:1", "--topic", "t", "--kind", "k"}, "--queue is required"},
		{[]string{"ingest", "--from", "kafka://127.0.0.1:1", "--topic", "t", "--queue", "q"}, "--kind is required"},
		{[]string{"ingest", "--topic", "t", "--queue", "q", "--kind", "k"}, "--from is required"},
		{[]string{"ingest", "--from", "amqp://127.0.0.1:1", "--topic", "t", "--queue", "q", "--kind", "k"}, "scheme must be kafka:// or nats://"},
		{[]string{"ingest", "--from", "kafka://", "--topic", "t", "--queue", "q", "--kind", "k"}, "missing host"},
		{with(n, "--topic", "t"), "--topic is for kafka://"},
		{with(k, "--subject", "s"), "--subject is for nats://"},
		{[]string{"ingest", "--from", "kafka://127.0.0.1:1", "--queue", "q", "--kind", "k"}, "--topic is required"},
		{[]string{"ingest", "--from", "nats://127.0.0.1:1", "--queue", "q", "--kind", "k"}, "--subject is required"},
		{with(n, "--group", "a.b"), "durable name"},
		{with(k, "--id-field", "a..b"), "--id-field"},
		{with(k, "--id-field", "$."), "--id-field"},
		{with(k, "--ordering-key-field", "a[x]", "--sequence-field", "b"), "--ordering-key-field"},
		{with(k, "--ordering-key-field", "a"), "go together"},
		{with(k, "--sequence-field", "a"), "go together"},
		{with(k, "--batch", "0"), "--batch"},
		{with(k, "--exit-after-idle", "-1s"), "--exit-after-idle"},
		{[]string{"ingest", "--from", "kafka://127.0.0.1:1", "--topic", "t", "--queue", "a b", "--kind", "k"}, "--queue"},
	} {
		e.fails(ExitUsage, tc.want, tc.args...)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Fatalf("bad flags created %s", ents[0].Name())
	}
	// A queue declared without ordering cannot take ordering fields: said
	// at start, not by refusing every message.
	db = testdb.SQLite(t)
	e = &cliEnv{t: t, db: db}
	cfg := filepath.Join(t.TempDir(), "backstop.yaml")
	if err := os.WriteFile(cfg, []byte("queues:\n  plain: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.fails(ExitUsage, "ordering", "ingest", "--from", "kafka://127.0.0.1:1", "--topic", "t", "--queue", "plain", "--kind", "k",
		"--config", cfg, "--ordering-key-field", "a", "--sequence-field", "b")
	if ts, err := e.client().List(context.Background(), backstop.ListParams{}); err != nil || len(ts) != 0 {
		t.Fatalf("%d tasks (%v), want none", len(ts), err)
	}
}

// backstop ingest on the database and through a server: records from
// kfake become tasks (one refused), and reading the topic again under
// another group adds none.
func TestIngestCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()
		addr := kc.ListenAddrs()[0]
		pc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
		if err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range 30 {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"id":"m-%d","key":"k%d","seq":%d}`, i, i%3, i)})
		}
		recs = append(recs, &kgo.Record{Value: []byte("not json")})
		if err := pc.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		pc.Close()
		args := func(group string) []string {
			return []string{"ingest", "--from", "kafka://" + addr, "--topic", "in", "--queue", "cli-in", "--kind", "k", "--group", group,
				"--id-field", "id", "--ordering-key-field", "key", "--sequence-field", "$.seq", "--exit-after-idle", "2s"}
		}
		if out := e.ok(args("g1")...); out != "ingested 30, duplicate 0, refused 1\n" {
			t.Fatalf("first ingest: %q", out)
		}
		if out := e.ok(args("g1")...); out != "ingested 0, duplicate 0, refused 0\n" {
			t.Fatalf("the group's offsets were not committed: %q", out)
		}
		r := newRemoteEnv(t, e, "operator")
		res := r.remote("", args("g2")...)
		if res.code != 0 || res.stdout != "ingested 0, duplicate 30, refused 1\n" {
			t.Fatalf("through the server: exit %d %q %s", res.code, res.stdout, res.stderr)
		}
		c := e.client()
		ts, err := c.List(context.Background(), backstop.ListParams{Queue: "cli-in", Limit: 100})
		if err != nil || len(ts) != 30 {
			t.Fatalf("%d tasks (%v), want 30", len(ts), err)
		}
		first, err := c.Get(context.Background(), "m-1")
		if err != nil || first.OrderingKey != "k1" || first.Sequence != 1 || !strings.HasPrefix(first.Attributes[ingest.SourceAttr], "kafka:in/") {
			t.Fatalf("task m-1: %+v (%v)", first, err)
		}
		ds, err := c.List(context.Background(), backstop.ListParams{Queue: ingest.RefusedQueue})
		if err != nil || len(ds) != 1 {
			t.Fatalf("%d refused (%v), want 1", len(ds), err)
		}
	})
}
