package backstop

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestMaintainerWarnsRetentionBelowFloor: a maintainer whose dead-letter
// retention is below the purge floor says so when it starts (retention is
// held at the floor: store/storetest's PurgeWhereAndFloor proves it on both
// stores); one at or above it says nothing.
func TestMaintainerWarnsRetentionBelowFloor(t *testing.T) {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		retention time.Duration
		warned    bool
	}{{2 * time.Hour, true}, {72 * time.Hour, false}, {-1, false}} {
		var log bytes.Buffer
		c, err := NewClient(s, &Config{PurgeFloor: 72 * time.Hour, Retention: RetentionConfig{DeadLetters: tc.retention},
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.NewMaintainer(&MaintainerConfig{ID: "m"}); err != nil {
			t.Fatal(err)
		}
		got := log.String()
		if warned := strings.Contains(got, "below dlq.purge_floor") && strings.Contains(got, "retention=2h0m0s") &&
			strings.Contains(got, "purge_floor=72h0m0s"); warned != tc.warned {
			t.Errorf("retention %v: log %q", tc.retention, got)
		}
		if got := maintenance.PolicyOf(c.cfg).DeadLetters; got != max(tc.retention, 72*time.Hour) && tc.retention >= 0 {
			t.Errorf("retention %v held at %v", tc.retention, got)
		}
	}
	if _, err := NewClient(s, &Config{PurgeFloor: -time.Hour}); err == nil {
		t.Fatal("a negative floor was accepted")
	}
}
