// Live streams for the pages, sharing one connection per browser.
//
// A page subscribes to a stream (all, type.T, queue.Q …) after a cursor.
// Its events are read by cursor with GET /v1/events (short requests) each
// time the browser's one live connection ticks (streamsource.js): that
// connection lives in a SharedWorker (streamworker.js) shared by every tab;
// where SharedWorker is missing, one tab, the holder of a Web Lock, keeps
// it and passes its ticks on over a BroadcastChannel; with neither, each tab
// keeps its own. So any number of tabs use one long-lived connection, and
// a page gets exactly the events of its stream, in order, none twice.
import { api } from './lib.js';
import { follow } from './streamsource.js';

const subs = new Set();
let started = false;

function wakeAll() {
  for (const s of subs) s.poke();
}

function startHub() {
  if (started) return;
  started = true;
  if (typeof SharedWorker === 'function') {
    try {
      const w = new SharedWorker(new URL('./streamworker.js', import.meta.url), { type: 'module', name: 'backstop-events' });
      let ok = true;
      w.onerror = () => {
        // A browser without module SharedWorkers: fall back.
        if (!ok) return;
        ok = false;
        leaderOrOwn();
      };
      w.port.onmessage = () => wakeAll();
      w.port.start();
      window.addEventListener('pagehide', () => w.port.postMessage('bye'));
      window.addEventListener('pageshow', (ev) => { if (ev.persisted) { w.port.postMessage('hello'); wakeAll(); } });
      return;
    } catch {
      // Fall through.
    }
  }
  leaderOrOwn();
}

// leaderOrOwn: the BroadcastChannel leader where Web Locks exist (the lock
// is held until the tab closes; the next tab waiting for it takes over),
// else a connection of this tab's own.
function leaderOrOwn() {
  if (typeof BroadcastChannel === 'function' && navigator.locks) {
    const ch = new BroadcastChannel('backstop-events');
    ch.onmessage = () => wakeAll();
    navigator.locks.request('backstop-events-leader', () => new Promise(() => {
      follow(() => {
        ch.postMessage('tick');
        wakeAll();
      });
    }));
    return;
  }
  follow(wakeAll);
}

// subscribe follows stream after the cursor after ('' from the start of
// the log, 'end' from now) and calls onEvent with each event in cursor
// order. It answers a function that ends the subscription.
export function subscribe(stream, after, onEvent) {
  startHub();
  let cursor = after;
  let reading = false;
  let again = false;
  let closed = false;
  const sub = {
    async poke() {
      if (closed) return;
      if (reading) {
        again = true;
        return;
      }
      reading = true;
      try {
        do {
          again = false;
          for (;;) {
            const qs = new URLSearchParams({ stream, limit: '1000' });
            if (cursor) qs.set('after', cursor);
            const p = await api('GET', `/v1/events?${qs}`);
            if (closed) return;
            for (const e of p.items) onEvent(e);
            const moved = p.next_cursor !== cursor;
            cursor = p.next_cursor;
            // An empty page that did not move is the end; a filtered
            // stream may move on without events (docs/events.md).
            if (!moved && p.items.length === 0) break;
          }
        } while (again && !closed);
      } catch {
        // Read again at the next tick.
      } finally {
        reading = false;
      }
    },
  };
  subs.add(sub);
  sub.poke();
  return () => {
    closed = true;
    subs.delete(sub);
  };
}
