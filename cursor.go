package backstop

import (
	"unicode"
	"unicode/utf8"

	"github.com/backstophq/backstop/internal/engine"
)

// A listing of tasks, dead letters or workers pages by id: its cursor
// (`after`, the API's next_cursor) is the last id of the previous page, so a
// cursor stays valid when the task it names is deleted. A cursor that no
// page could have handed out is refused, not read as "nothing after it".

// checkTaskCursor: a task cursor is a task id (ValidID), nothing else.
func checkTaskCursor(after string) error {
	if after == "" {
		return nil
	}
	if engine.ValidName(after) != nil {
		return invalid("after", "bad cursor %q: a cursor is the last id of the previous page (1-128 letters, digits, '_', '.', ':' or '-')", after)
	}
	return nil
}

// checkWorkerCursor: a worker id is chosen by its worker, so the cursor is
// only held to what any id can be: valid UTF-8, no control characters (a
// NUL cannot even reach Postgres), at most 255 bytes.
func checkWorkerCursor(after string) error {
	if len(after) > 255 || !utf8.ValidString(after) {
		return invalid("after", "bad cursor %q: a cursor is the last id of the previous page", after)
	}
	for _, r := range after {
		if unicode.IsControl(r) {
			return invalid("after", "bad cursor %q: a cursor is the last id of the previous page", after)
		}
	}
	return nil
}
