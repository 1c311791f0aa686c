//go:build !cgo || backstop_purego

package sqlitestore

import (
	"net/url"

	_ "modernc.org/sqlite" // pure-Go SQLite, for builds without cgo
)

// DriverName is the database/sql driver this build uses.
const DriverName = "sqlite"

func dsn(path string, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	for _, p := range pragmas {
		q.Add("_pragma", pragmaCall(p))
	}
	if writer {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}
