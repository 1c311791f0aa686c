//go:build !cgo || backstop_purego

package sqlitestore

import (
	"errors"
	"net/url"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite, for builds without cgo
)

// DriverName is the database/sql driver this build uses.
const DriverName = "sqlite"

func dsn(path string, writer bool, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	for _, p := range pragmas {
		q.Add("_pragma", pragmaCall(p))
	}
	if writer {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// sqliteCode is the primary result code of a SQLite error (0: not one).
func sqliteCode(err error) int {
	var se interface{ Code() int } // modernc.org/sqlite's *Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}
