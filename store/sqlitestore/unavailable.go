package sqlitestore

import "github.com/backstophq/backstop/store"

func init() { store.RegisterClassifier(classify) }

// SQLite's primary result codes that say "later": https://sqlite.org/rescode.html
const (
	codeBusy   = 5  // SQLITE_BUSY: another connection holds the lock past the busy timeout
	codeLocked = 6  // SQLITE_LOCKED: a conflict inside this process's shared cache
	codeFull   = 13 // SQLITE_FULL: the disk (or max_page_count) is full
)

// classify names the cause of a SQLite error that is temporary
// (store.Classify), or answers "".
func classify(err error) string {
	switch sqliteCode(err) {
	case codeBusy, codeLocked:
		return store.CauseBusy
	case codeFull:
		return store.CauseDiskFull
	}
	return ""
}
