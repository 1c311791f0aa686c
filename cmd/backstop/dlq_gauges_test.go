package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestDLQGaugesOnMetrics: `serve`'s /metrics carries, per queue, the age of
// the oldest open dead letter and the open dead letters' payload bytes
// (closed ones not counted), and the dead-letter retention and purge floor
// it runs with (from the environment here), in the format promtool accepts.
func TestDLQGaugesOnMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := deadLetters(t, db, "gauged", 3)
	ctx := context.Background()
	if _, err := c.Discard(ctx, backstop.DiscardParams{ID: "gauged-00000", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	open, err := c.DeadLetters(ctx, backstop.ListParams{Queue: "gauged", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}})
	if err != nil || len(open) != 2 {
		t.Fatalf("open dead letters: %d %v", len(open), err)
	}
	bytes := 0
	for _, d := range open {
		bytes += d.PayloadSize
	}
	if bytes == 0 {
		t.Fatal("fixture: the open dead letters carry no payload bytes")
	}

	addr := freeAddr(t)
	startServeProc(t, addr, []string{"BACKSTOP_RETENTION_DEAD_LETTERS=2h", "BACKSTOP_DLQ_PURGE_FLOOR=72h"},
		"--db", db, "serve", "--dev", "--addr", addr, "--maintenance-interval", "100ms")
	text := scrapeURL(t, "http://"+addr+"/metrics")
	value := func(series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("/metrics lacks %s:\n%s", series, text)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if age := value(`backstop_dlq_oldest_open_age_seconds{queue="gauged"}`); age <= 0 || age > 3600 {
		t.Errorf("oldest open age %v s: want the seconds since the test made it", age)
	}
	if got := value(`backstop_dlq_open_payload_bytes{queue="gauged"}`); got != float64(bytes) {
		t.Errorf("open payload bytes %v, want %d", got, bytes)
	}
	for series, want := range map[string]float64{"backstop_dlq_retention_seconds": 7200, "backstop_dlq_purge_floor_seconds": 259200} {
		if got := value(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
	checkPromtool(t, text)
}
