//go:build !cgo || backstop_purego

package sqlitestore

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite, for builds without cgo
)

// DriverName is the database/sql driver this build uses.
const DriverName = "sqlite"

func dsn(path string, writer bool, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	for _, p := range pragmas {
		if strings.HasPrefix(p, "page_size") {
			// modernc runs the _pragma list sorted by its text (busy_timeout
			// first), which puts journal_mode before page_size, too late for
			// a new file; the quoted schema name sorts before any letter.
			p = `"main".` + p
		}
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
