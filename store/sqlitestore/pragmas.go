package sqlitestore

import "strings"

// pragmas are set on every connection, whichever driver is built.
var pragmas = []string{
	"journal_mode = WAL",
	// In WAL mode NORMAL never corrupts the database; a power loss may undo
	// the last transactions before a checkpoint, a crash of the process none.
	"synchronous = NORMAL",
	"foreign_keys = OFF",
	"temp_store = MEMORY",
	"cache_size = -65536", // 64 MiB of page cache per connection
	// Checkpoint every ~16 MiB of WAL instead of 4 MiB: pages rewritten again
	// and again (the claim index, hot task rows) are copied back once.
	"wal_autocheckpoint = 4000",
}

// pragmaCall turns "name = value" into modernc's "name(value)" form.
func pragmaCall(p string) string {
	name, value, _ := strings.Cut(p, "=")
	return strings.TrimSpace(name) + "(" + strings.TrimSpace(value) + ")"
}
