package backstop

import (
	"sync"

	"github.com/backstophq/backstop/store"
)

// settleParallelism is what a store may implement to say how many settle
// batches it applies well at once. Postgres (pgstore) answers 2: two
// settle statements on disjoint tasks run side by side on the server, so a
// finished attempt waits for at most about one batch instead of queueing
// behind a full one (the follower's lag of task.succeeded) and the server
// overlaps one batch's commit with the next one's work. A store without it
// (SQLite: one writer at a time) gets one completer, whose batches are as
// big as the backlog.
type settleParallelism interface {
	SettleParallelism() int
}

// maxCompleterBatch bounds one settle statement.
const maxCompleterBatch = 1000

// startCompleters starts the completers; completersDone is closed once all of
// them have drained settleCh after it was closed.
func (w *Worker) startCompleters() {
	n := 1
	if p, ok := w.c.store.(settleParallelism); ok && p.SettleParallelism() > 1 {
		n = p.SettleParallelism()
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.completer()
		}()
	}
	go func() {
		wg.Wait()
		close(w.completersDone)
	}()
}

// completer batches settlements: under load many attempts settle in one
// statement (what has queued up while the last batch was written, up to
// maxCompleterBatch); when idle each settles at once. Several completers take
// from the same channel: the settlements of one task never overlap (one
// attempt settles once), so their batches touch disjoint tasks.
func (w *Worker) completer() {
	var scratch []store.Settlement
	batch := make([]settleItem, 0, maxCompleterBatch)
	for s := range w.settleCh {
		batch = append(batch[:0], s)
	fill:
		for len(batch) < maxCompleterBatch {
			select {
			case s, ok := <-w.settleCh:
				if !ok {
					break fill
				}
				batch = append(batch, s)
			default:
				break fill
			}
		}
		w.flush(batch, &scratch)
	}
}

// settleQueue bounds the finished attempts waiting for a completer (beyond
// those the worker's slots hold while they wait to hand theirs over). Every
// one of them is a task whose task.succeeded event is not written yet: the
// bound is what keeps a follower's lag near one batch's time instead of
// several, while a full batch is still always ready when a completer is
// free (slots blocked on the hand-over feed the next batch directly).
const settleQueue = maxCompleterBatch
