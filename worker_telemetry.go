package backstop

import (
	"github.com/backstophq/backstop/store"
)

// settlements lists the items' settlements in a completer's scratch.
func settlements(items []settleItem, scratch *[]store.Settlement) []store.Settlement {
	*scratch = (*scratch)[:0]
	for i := range items {
		*scratch = append(*scratch, items[i].s)
	}
	return *scratch
}

// settledBatch records the in-process attempts of one settle batch once
// the store answered: an attempt whose settlement applied is counted (by
// queue, kind, outcome, with its duration, retry or dead letter) and its
// span ends with the outcome; one that did not apply (its lease was no
// longer current: maintenance settled it as lease_expired, and counted it)
// or could not be written is not counted, and its span ends abandoned.
func (t *telemetry) settledBatch(items []settleItem, oks []bool) {
	for i := range items {
		it := &items[i]
		if i < len(oks) && oks[i] {
			t.settled(it.a.span, it.a.task, it.a.started, &it.s)
		} else {
			t.leaseLost(it.a.span)
		}
	}
}
