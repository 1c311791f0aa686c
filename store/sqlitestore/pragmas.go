package sqlitestore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// pageSize is the page size of a file this store creates. A drained task's
// claim and settle dirty about 200 pages of 4 KiB per 1,000 tasks, each a
// WAL frame (its header, its checksum, its write) and a page copied back
// at checkpoint; at 16 KiB the same rows take a third of the frames and
// the store loop costs about a sixth less CPU a task (docs/benchmarks.md).
// A file keeps the page size it was created with: this applies to new
// files only.
const pageSize = 16384

// walCheckpointBytes is how much WAL a commit lets grow before it copies
// the pages back (wal_autocheckpoint counts pages: setCheckpoint turns
// this into the file's page count). Pages rewritten again and again (the
// claim index, hot task rows) are copied back once per checkpoint.
const walCheckpointBytes = 16 << 20

// pragmas are set on every connection, whichever driver is built.
var pragmas = []string{
	// Before journal_mode: a page size is taken only while the file is
	// empty (and not in WAL mode); an existing file ignores it.
	"page_size = " + strconv.Itoa(pageSize),
	"journal_mode = WAL",
	// In WAL mode NORMAL never corrupts the database; a power loss may undo
	// the last transactions before a checkpoint, a crash of the process none.
	"synchronous = NORMAL",
	"foreign_keys = OFF",
	"temp_store = MEMORY",
	"cache_size = -65536", // 64 MiB of page cache per connection
	// walCheckpointBytes at pageSize; setCheckpoint corrects it on the
	// writer of a file with other pages.
	"wal_autocheckpoint = " + strconv.Itoa(walCheckpointBytes/pageSize),
}

// setCheckpoint sets the writer's wal_autocheckpoint to walCheckpointBytes
// in the file's own pages (a file created with 4 KiB pages checkpoints
// every 4,096 of them, not every 1,024). The writer is one connection that
// is never closed while the store is open.
func setCheckpoint(ctx context.Context, w *sql.DB) error {
	var size int
	if err := w.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&size); err != nil {
		return err
	}
	if size <= 0 || size == pageSize {
		return nil
	}
	_, err := w.ExecContext(ctx, `PRAGMA wal_autocheckpoint = `+strconv.Itoa(walCheckpointBytes/size))
	return err
}

// pragmaCall turns "name = value" into modernc's "name(value)" form.
func pragmaCall(p string) string {
	name, value, _ := strings.Cut(p, "=")
	return strings.TrimSpace(name) + "(" + strings.TrimSpace(value) + ")"
}
