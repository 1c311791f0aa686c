package backstop

import (
	"maps"
	"slices"
)

// handlerSet is what Handle, HandleDefault and Use registered. It is
// copied on each registration and read without a lock by every attempt
// (handlerFor), so thousands of attempts do not queue on the worker's
// mutex for it.
type handlerSet struct {
	byKind   map[string]Handler
	fallback Handler // runs kinds without a handler of their own
	mw       []Middleware
}

// updateHandlers applies f to a copy of the handler set and publishes it.
func (w *Worker) updateHandlers(f func(*handlerSet)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := handlerSet{byKind: map[string]Handler{}}
	if old := w.handlers.Load(); old != nil {
		next = handlerSet{byKind: maps.Clone(old.byKind), fallback: old.fallback, mw: slices.Clone(old.mw)}
	}
	f(&next)
	w.handlers.Store(&next)
}

// handlerFor is the handler of kind (the default handler when it has none
// of its own) wrapped in the middleware, or nil.
func (w *Worker) handlerFor(kind string) Handler {
	hs := w.handlers.Load()
	if hs == nil {
		return nil
	}
	h := hs.byKind[kind]
	if h == nil {
		h = hs.fallback
	}
	if h == nil {
		return nil
	}
	for i := len(hs.mw) - 1; i >= 0; i-- {
		h = hs.mw[i](h)
	}
	return h
}
