package backstop

import (
	"sync"

	"github.com/backstophq/backstop/store"
)

// maxCompleterBatch bounds one settle statement.
const maxCompleterBatch = 1000

// startCompleters starts the completers; completersDone is closed once all of
// them have drained settleCh after it was closed.
func (w *Worker) startCompleters() {
	// As many completers as the store applies settle batches well at
	// once (store.Features).
	n := max(1, w.c.store.Features().SettleParallelism)
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

// settlements lists the items' settlements in a completer's scratch.
func settlements(items []settleItem, scratch *[]store.Settlement) []store.Settlement {
	*scratch = (*scratch)[:0]
	for i := range items {
		*scratch = append(*scratch, items[i].s)
	}
	return *scratch
}
