package pgstore

// TaskEventRows exposes taskEventRows to the external tests (plans).
var TaskEventRows = taskEventRows
