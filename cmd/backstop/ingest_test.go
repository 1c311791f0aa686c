package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// From the command line alone: 1,000 shuffled results of 20 keys (each key
// missing one sequence) in Kafka (kfake, in-process, on loopback) or NATS
// JetStream (an in-process nats-server) become exactly 1,000 tasks through
// `backstop ingest`, SIGKILLed twice mid-way and restarted: nothing lost,
// nothing enqueued twice (Kafka: ids from --id-field; NATS: ids derived
// from the stream sequence). Then `backstop work` handles each key in
// sequence, told of the one gap where the result was withheld.
func TestIngestCLIKilled(t *testing.T) {
	t.Parallel()
	for _, broker := range []string{"kafka", "nats"} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			for _, st := range stores {
				t.Run(st.name, func(t *testing.T) {
					t.Parallel()
					ingestKilled(t, broker, st.url(t))
				})
			}
		})
	}
}

func ingestKilled(t *testing.T, broker, db string) {
	ctx := context.Background()
	_, c := storeClient(t, db)
	const keys, per = 20, 51
	type res struct {
		key string
		seq int
	}
	var all []res
	for k := range keys {
		for s := 1; s <= per; s++ {
			if s != 10+k { // withheld: key k's gap
				all = append(all, res{fmt.Sprintf("sub-%02d", k), s})
			}
		}
	}
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	value := func(r res) []byte {
		return fmt.Appendf(nil, `{"check":{"id":"%s-%d","subscription":"%s","minute":%d}}`, r.key, r.seq, r.key, r.seq)
	}
	if len(all) != 1000 {
		t.Fatalf("%d results", len(all))
	}

	// One --id: a restarted ingester renews its own lease at once.
	args := []string{"--db", db, "ingest", "--id", "ingester", "--queue", "results", "--kind", "check", "--batch", "1",
		"--ordering-key-field", "check.subscription", "--sequence-field", "$.check.minute"}
	switch broker {
	case "kafka":
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "uptime"))
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()
		pc, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()[0]), kgo.DefaultProduceTopic("uptime"),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]*kgo.Record, len(all))
		for i, r := range all {
			recs[i] = &kgo.Record{Value: value(r)}
		}
		if err := pc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		pc.Close()
		args = append(args, "--from", "kafka://"+kc.ListenAddrs()[0], "--topic", "uptime", "--id-field", "check.id")
	case "nats":
		ns := testnats.Start(t, -1, t.TempDir())
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "UPTIME", Subjects: []string{"uptime.>"}}); err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if _, err := js.Publish(ctx, "uptime.results", value(r)); err != nil {
				t.Fatal(err)
			}
		}
		nc.Close()
		args = append(args, "--from", ns.ClientURL(), "--subject", "uptime.results", "--ack-wait", "2s")
	}

	count := func() int {
		ts, err := c.List(ctx, backstop.ListParams{Queue: "results", Limit: 10000, WithoutPayload: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	dir := t.TempDir()
	for n, at := range []int{150, 500} {
		p := startProc(t, exec.Command(binary, args...), filepath.Join(dir, fmt.Sprintf("ingest%d.stderr", n)), fmt.Sprintf("ingest %d", n), 0)
		testwait.For(t, fmt.Sprintf("%d tasks", at), func() bool { return count() >= at })
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.wait(t, "killed ingest")
		got := count()
		t.Logf("ingest %d killed at %d tasks", n, got)
		if got >= len(all) {
			t.Fatalf("ingest %d finished before it was killed (%d tasks): nothing proven", n, got)
		}
	}
	out, err := exec.Command(binary, append(args, "--exit-after-idle", "3s")...).Output()
	if err != nil {
		t.Fatalf("last ingest: %v", err)
	}
	t.Logf("last ingest: %s", strings.TrimSpace(string(out)))
	if !strings.HasSuffix(string(out), "refused 0\n") {
		t.Fatalf("last ingest: %q", out)
	}
	if n := count(); n != len(all) {
		t.Fatalf("%d tasks, want exactly %d", n, len(all))
	}

	cfg := filepath.Join(dir, "backstop.yaml")
	if err := os.WriteFile(cfg, []byte("queues:\n  results:\n    ordering: {enabled: true, step: 1, backoff: [100ms]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runLog := filepath.Join(dir, "handled.log")
	w := exec.Command(binary, "--db", db, "work", "--queue", "results", "--config", cfg, "--concurrency", "8", "--exit-after-idle", "3s",
		"--", "sh", "-c", `echo "$BACKSTOP_ORDERING_KEY $BACKSTOP_SEQUENCE $BACKSTOP_GAPS" >> "$RUN_LOG"`)
	w.Env = append(os.Environ(), "RUN_LOG="+runLog)
	if out, err := w.CombinedOutput(); err != nil {
		t.Fatalf("work: %v\n%s", err, out)
	}
	b, err := os.ReadFile(runLog)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]int{}
	gaps := map[string][]backstop.Gap{}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines {
		f := strings.SplitN(l, " ", 3)
		s, _ := strconv.Atoi(f[1])
		seqs[f[0]] = append(seqs[f[0]], s)
		var g []backstop.Gap
		if err := json.Unmarshal([]byte(f[2]), &g); err != nil {
			t.Fatalf("BACKSTOP_GAPS %q: %v", f[2], err)
		}
		gaps[f[0]] = append(gaps[f[0]], g...)
	}
	if len(lines) != len(all) {
		t.Fatalf("%d tasks handled, want %d", len(lines), len(all))
	}
	for k := range keys {
		key := fmt.Sprintf("sub-%02d", k)
		var want []int
		for s := 1; s <= per; s++ {
			if s != 10+k {
				want = append(want, s)
			}
		}
		if !slices.Equal(seqs[key], want) {
			t.Fatalf("key %s handled %v, want %v", key, seqs[key], want)
		}
		if g := gaps[key]; len(g) != 1 || g[0] != (backstop.Gap{From: int64(10 + k), To: int64(10 + k)}) {
			t.Fatalf("key %s told of gaps %v, want [%d-%d]", key, g, 10+k, 10+k)
		}
	}
}
