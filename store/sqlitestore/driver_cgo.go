//go:build cgo && !backstop_purego

package sqlitestore

import (
	"database/sql"
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/mattn/go-sqlite3" // cgo SQLite: chosen by measurement, see docs/benchmarks.md
)

// DriverName is the database/sql driver this build uses.
const DriverName = "sqlite3_backstop"

func init() {
	sql.Register(DriverName, &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			for _, p := range pragmas {
				if _, err := c.Exec("PRAGMA "+p, nil); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

func dsn(path string, writer bool, busy time.Duration) string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	// Reuse prepared statements per connection: preparing each statement
	// anew was a fifth of the ordering simulation's time.
	q.Set("_stmt_cache_size", "128")
	// No connection mutex (SQLITE_OPEN_NOMUTEX): database/sql never uses a
	// connection from two goroutines at once, and in full-mutex mode every
	// bind and every column read took and released a mutex (about 5% of a
	// drain's instructions, measured with callgrind).
	q.Set("_mutex", "no")
	if writer {
		// BEGIN IMMEDIATE: take the write lock up front, so two processes
		// never deadlock upgrading read transactions.
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// sqliteCode is the primary result code of a SQLite error (0: not one).
func sqliteCode(err error) int {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return int(se.Code)
	}
	return 0
}
