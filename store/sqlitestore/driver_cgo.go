//go:build cgo && !backstop_purego

package sqlitestore

import (
	"net/url"

	_ "github.com/mattn/go-sqlite3" // cgo SQLite: chosen by measurement, see docs/benchmarks.md
)

// DriverName is the database/sql driver this build uses.
const DriverName = "sqlite3"

func dsn(path string, writer bool) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_busy_timeout", "10000")
	q.Set("_foreign_keys", "off")
	q.Set("cache", "private")
	if writer {
		// BEGIN IMMEDIATE: take the write lock up front, so two processes
		// never deadlock upgrading read transactions.
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}
