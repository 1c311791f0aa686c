// Ordering: an ordered queue's keys (docs/ordering.md) — the last sequence
// handled, the busy task, the tasks buffered behind a gap and the others
// waiting, the drain's next run and when the key's state expires — 50 a
// page with the server's cursor, live on the queue's event stream.
import { api, h, clear, fmtTime, field, live, debounce, table, fmtClockSeconds } from './lib.js';

const columns = ['Key', 'Last sequence', 'Busy task', 'Buffered', 'Waiting (held, ready, replay)', 'Drain due', 'Expires'];

function timeCell(s, none) {
  return s ? h('time', { datetime: s }, fmtTime(s)) : none;
}

function keyRow(k) {
  const waiting = (k.held || 0) + (k.ready || 0) + (k.replay || 0);
  const busy = k.busy_task_id
    ? h('a', { href: `#/tasks/${encodeURIComponent(k.busy_task_id)}`, class: 'mono busy',
      'aria-label': `Busy task ${k.busy_task_id}, sequence ${k.busy_sequence}` }, k.busy_task_id, ` (sequence ${k.busy_sequence})`)
    : 'none';
  const cells = [
    [h('span', { class: 'mono' }, k.key), 'key'],
    [k.last_sequence === null || k.last_sequence === undefined ? 'none' : String(k.last_sequence), 'last'],
    [busy, 'busy'],
    [String(k.buffered || 0), 'buffered'],
    [`${waiting} (${k.held || 0}, ${k.ready || 0}, ${k.replay || 0})`, 'waiting'],
    [timeCell(k.drain_due_at, 'none'), 'drain'],
    [timeCell(k.expires_at, 'no state yet'), 'expires'],
  ];
  return h('tr', { dataset: { key: k.key } }, cells.map(([c, cls], i) =>
    i === 0 ? h('th', { scope: 'row', class: cls }, c) : h('td', { class: cls }, c)));
}

export async function orderingPage(main, q) {
  const queue = q.get('queue') || '';
  const input = h('input', { id: 'of-queue', name: 'queue', value: queue, list: 'of-queues', required: true,
    autocomplete: 'off', spellcheck: 'false' });
  const options = h('datalist', { id: 'of-queues' });
  // The queues the server knows, offered in the box (a queue whose tasks
  // are all gone can still be typed): read once the page shows, so that
  // the queues' counts never hold the page up.
  const offerQueues = () => api('GET', '/v1/queues')
    .then((p) => clear(options, (p.items || []).map((x) => h('option', { value: x.name })))).catch(() => {});
  const form = h('form', { class: 'filters', id: 'ordering-form', role: 'search', 'aria-label': 'Choose an ordered queue' },
    field('Queue', input), options, h('button', { type: 'submit' }, 'Show keys'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (input.value) p.set('queue', input.value.trim());
    location.hash = `#/ordering?${p}`;
  });
  const intro = h('p', { class: 'muted' }, 'Per ordering key: the last sequence handled, the task running now, ',
    'the tasks buffered behind a gap (or a first hold) and the others waiting, when the drain runs next and when the key\'s state expires. ',
    'Gaps reported are in the events (ordering.gap_reported) and on the tasks that carry them.');
  if (!queue) {
    // The ordered queues (GET /v1/ordering): declared in the server's
    // configuration, or holding ordering keys.
    const ordered = await api('GET', '/v1/ordering');
    const list = ordered.items.length === 0
      ? h('p', { class: 'muted', id: 'ordered-queues' }, 'No queue is ordered: none is declared with ordering and none holds ordering keys.')
      : h('div', { class: 'scroll', id: 'ordered-queues' }, table('Ordered queues', ['Queue', 'Ordered by', 'Keys'],
        ordered.items.map((x) => [h('a', { href: `#/ordering?${new URLSearchParams({ queue: x.queue })}`, dataset: { queue: x.queue } }, x.queue),
          x.declared ? 'the configuration' : 'its tasks\' ordering keys', x.has_keys ? 'yes' : 'none yet'])));
    clear(main, h('h1', {}, 'Ordering'), intro, form, h('h2', {}, 'Ordered queues'), list);
    setTimeout(offerQueues); // after the page is shown
    return;
  }
  const here = location.hash;
  const render = async () => {
    const aq = new URLSearchParams({ limit: '50' });
    if (q.get('after')) aq.set('after', q.get('after'));
    const page = await api('GET', `/v1/ordering/${encodeURIComponent(queue)}/keys?${aq}`);
    const nq = new URLSearchParams({ queue });
    if (page.next_cursor) nq.set('after', page.next_cursor);
    const list = page.items.length === 0
      ? h('p', { class: 'muted' }, `Queue ${queue} has no ordering keys${q.get('after') ? ' after this one' : ''}.`)
      : h('table', {},
        h('caption', { class: 'sr-only' }, `Ordering keys of queue ${queue}`),
        h('thead', {}, h('tr', {}, columns.map((x) => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, page.items.map(keyRow)));
    clear(main,
      h('h1', {}, 'Ordering: ', h('span', { class: 'mono' }, queue)),
      intro, form,
      h('div', { class: 'scroll', id: 'ordering-keys' }, list),
      h('nav', { class: 'pager', 'aria-label': 'Pages' },
        q.get('after') ? h('a', { href: `#/ordering?${new URLSearchParams({ queue })}` }, 'First page') : null,
        page.next_cursor ? h('a', { href: `#/ordering?${nq}`, rel: 'next', id: 'ordering-next' }, 'Next page') : null),
      h('p', { class: 'muted small' }, 'Updated ', fmtClockSeconds(),
        ' · live: the keys refresh on the queue\'s events'));
  };
  await render();
  setTimeout(offerQueues); // after the page is shown
  const refresh = debounce(() => { if (location.hash === here) render().catch(() => {}); }, 1000);
  live(main, `queue.${queue}`, refresh);
}
