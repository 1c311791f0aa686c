// A queue's page: its counts by state, links to its tasks and dead
// letters, and its history over 24 h / 7 d by kind (activity.js).
import { api, h, clear, badge, live, debounce, atLeast } from './lib.js';
import { historyPanel } from './activity.js';

export async function queuePage(main, name) {
  const history = historyPanel({ queue: name });
  let first = true;
  const render = async () => {
    if (!first) history.refresh();
    first = false;
    const queues = await api('GET', '/v1/queues');
    const q = queues.items.find((x) => x.name === name);
    const counts = q ? Object.entries(q.counts).filter(([, n]) => n > 0) : [];
    const enc = encodeURIComponent(name);
    clear(main,
      h('h1', {}, `Queue ${name}`, ' ', q && q.paused ? badge('paused') : ''),
      h('p', {},
        h('a', { href: `#/tasks?queue=${enc}` }, 'Tasks'), ' · ',
        h('a', { href: `#/dlq?queue=${enc}` }, 'Dead letters'), ' · ',
        h('a', { href: '#/' }, 'Overview')),
      h('p', { id: 'queue-counts', class: 'muted' }, counts.length
        ? counts.map(([s, n]) => `${atLeast(n, q.counts_capped && q.counts_capped.includes(s))} ${s}`).join(' · ')
        : 'No task in this queue now.'),
      history.el);
  };
  await render();
  // The history moves when the maintenance leader rolls up: redraw on
  // events, at most every 5 s.
  const view = main;
  const refresh = debounce(() => { if (location.hash.startsWith(`#/queues/`)) render().catch(() => {}); }, 5000);
  live(view, 'all', refresh);
}
