// Overview: each queue with its counts by state, DLQ size, oldest pending
// age and workers; pause and resume (operator).
import { api, h, clear, can, flash, errorText, fmtAge, badge, table, live, debounce } from './lib.js';

const states = ['scheduled', 'pending', 'buffered', 'running', 'succeeded', 'dead', 'canceled'];

export async function overviewPage(main) {
  const render = async () => {
    const [queues, workers] = await Promise.all([
      api('GET', '/v1/queues'),
      api('GET', '/v1/workers?limit=1000'),
    ]);
    // Oldest pending: the queue's earliest pending run_at (the counts' scan).
    const oldest = queues.items.map((q) => q.oldest_pending_at || null);
    const now = Date.now();
    const byState = {};
    for (const w of workers.items) byState[w.state] = (byState[w.state] || 0) + 1;
    const rows = queues.items.map((q, i) => {
      const cells = [
        h('a', { href: `#/tasks?queue=${encodeURIComponent(q.name)}` }, q.name),
        q.paused ? badge('paused') : badge('running', 'active'),
        // The dead column is the queue's DLQ (open, discarded and resolved
        // dead letters are kept): it links to the queue's open ones.
        ...states.map((s) => (s === 'dead'
          ? h('a', { href: `#/dlq?queue=${encodeURIComponent(q.name)}`, 'aria-label': `Dead letters in ${q.name}: ${q.counts.dead || 0}` },
            String(q.counts.dead || 0))
          : h('span', { class: q.counts[s] ? '' : 'muted' }, String(q.counts[s] || 0)))),
        oldest[i] ? fmtAge(now - new Date(oldest[i])) : '—',
      ];
      if (can('operator')) {
        cells.push(h('button', {
          type: 'button', class: 'small', 'data-action': q.paused ? 'resume' : 'pause', 'data-queue': q.name,
          onclick: async (ev) => {
            ev.target.disabled = true;
            try {
              await api('POST', `/v1/queues/${encodeURIComponent(q.name)}/${q.paused ? 'resume' : 'pause'}`);
              flash(`Queue ${q.name} ${q.paused ? 'resumed' : 'paused'}.`);
            } catch (e) {
              flash(errorText(e), 'error');
            }
            await render();
          },
        }, q.paused ? `Resume ${q.name}` : `Pause ${q.name}`));
      }
      return cells;
    });
    const headers = ['Queue', 'Status', ...states.map((s) => (s === 'dead' ? 'dead (DLQ)' : s)), 'Oldest pending'];
    if (can('operator')) headers.push('Action');
    clear(main,
      h('h1', {}, 'Overview'),
      h('section', { class: 'cards', 'aria-label': 'Workers' },
        stat('workers-active', byState.active || 0, 'active worker', 'active workers'),
        stat('workers-stale', byState.stale || 0, 'stale worker', 'stale workers'),
        stat('workers-stopping', byState.stopping || 0, 'stopping worker', 'stopping workers'),
        stat('dead-letters', queues.items.reduce((n, q) => n + (q.counts.dead || 0), 0), 'dead letter', 'dead letters')),
      h('section', { 'aria-labelledby': 'queues-title' },
        h('h2', { id: 'queues-title' }, 'Queues'),
        h('div', { class: 'scroll' }, table('Queues with their task counts by state', headers, rows, 'No queue holds tasks yet.'))),
      h('p', { class: 'muted small' }, 'Updated ', new Date().toLocaleTimeString(undefined, { hour12: false }),
        ' · live: the page refreshes on queue events'));
  };
  await render();
  // Live: any task event may change the counts; refresh at most every 2s.
  const refresh = debounce(() => { if (location.hash === '' || location.hash === '#/') render().catch(() => {}); }, 2000);
  live(main, 'all', refresh);
}

function stat(id, n, one, many) {
  return h('div', { class: 'card stat' }, h('span', { class: 'n', id }, String(n)), ' ', n === 1 ? one : many);
}
