// follow keeps one connection to the event log's live stream (all events,
// from the end) and calls onTick whenever anything arrives on it (an
// event, or the server's keep-alive every 15 s) and whenever it
// (re)connects. Ticks carry no events: a tick only says "the log may have
// moved"; each page reads its own stream by cursor (livestream.js), so a
// lost or late tick can delay an update but never lose or reorder one.
// Ticks are coalesced to at most one per tickEvery. It answers a function
// that stops following.
const tickEvery = 100; // ms

export function follow(onTick) {
  let stopped = false;
  let ctrl = null;
  let timer = null;
  let last = 0;
  const tick = () => {
    if (stopped || timer) return;
    const wait = Math.max(0, last + tickEvery - Date.now());
    timer = setTimeout(() => { timer = null; last = Date.now(); if (!stopped) onTick(); }, wait);
  };
  (async () => {
    let delay = 1000;
    while (!stopped) {
      ctrl = new AbortController();
      try {
        const r = await fetch('/v1/events/stream?stream=all&after=end', {
          credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'text/event-stream' }, signal: ctrl.signal,
        });
        if (r.ok && r.body) {
          delay = 1000;
          tick();
          const rd = r.body.getReader();
          for (;;) {
            const { done } = await rd.read();
            if (done) break;
            tick();
          }
        }
      } catch {
        // Network error or abort: retry below (unless stopped).
      }
      if (stopped) return;
      await new Promise((res) => setTimeout(res, delay));
      delay = Math.min(delay * 2, 15000);
    }
  })();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    if (ctrl) ctrl.abort();
  };
}
