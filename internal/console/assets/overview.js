// Overview: each queue with its counts by state, DLQ size, oldest pending
// age and workers; pause and resume (operator); the sinks and their lag
// (relay.js).
import { api, h, clear, can, flash, errorText, fmtAge, badge, table, live, debounce, atLeast, fmtClock, fmtClockSeconds } from './lib.js';
import { svg, historyPanel } from './activity.js';
import { relayStatus, sinksSection } from './relay.js';

const states = ['scheduled', 'pending', 'buffered', 'running', 'succeeded', 'dead', 'canceled'];
// stuckAfter: how long the oldest pending task of a queue no active worker
// takes may wait before the overview warns.
const stuckAfter = 60 * 1000;

export async function overviewPage(main) {
  // The history reads on its own (it is not part of the page's first
  // content) and keeps its charts while it reads again.
  const history = historyPanel();
  let first = true;
  // The sinks (GET /v1/relay) are not part of the page's first content
  // either: the queues show without waiting for them, and the section
  // shown last stays until the new one is read.
  let sinks = h('div', { class: 'sinks-slot' });
  const relayInto = (slot) => relayStatus().then((st) => {
    const el = sinksSection(st) || h('div', { class: 'sinks-slot' });
    slot.replaceWith(el); // nothing yet when the page has not placed it
    if (sinks === slot) sinks = el;
  });
  const render = async () => {
    if (!first) history.refresh();
    first = false;
    relayInto(sinks).catch(() => {});
    const [queues, workers, activity] = await Promise.all([
      api('GET', '/v1/queues'),
      api('GET', '/v1/workers?limit=1000'),
      api('GET', '/v1/activity?minutes=60'),
    ]);
    // Oldest pending: the queue's earliest pending run_at (the counts' scan).
    const oldest = queues.items.map((q) => q.oldest_pending_at || null);
    const now = Date.now();
    const byState = {};
    for (const w of workers.items) byState[w.state] = (byState[w.state] || 0) + 1;
    // A queue whose oldest pending task waited past stuckAfter while no
    // active worker takes it is not "running": it is warned about.
    const served = new Set(workers.items.filter((w) => w.state === 'active').flatMap((w) => w.queues || []));
    const status = (q, i) => {
      if (q.paused) return badge('paused');
      const age = oldest[i] ? now - new Date(oldest[i]) : 0;
      if (age > stuckAfter && !served.has(q.name)) {
        return h('span', { class: 'badge warn', id: `stuck-${q.name}`, title: `pending work ${fmtAge(age)} old and no active worker takes this queue` },
          `no worker · waiting ${fmtAge(age)}`);
      }
      return badge('running', 'active');
    };
    const rows = queues.items.map((q, i) => {
      const cells = [
        h('a', { href: `#/tasks?queue=${encodeURIComponent(q.name)}` }, q.name),
        status(q, i),
        // The dead column is the queue's DLQ (open, discarded and resolved
        // dead letters are kept): it links to the queue's open ones.
        ...states.map((s) => (s === 'dead'
          ? h('a', { href: `#/dlq?queue=${encodeURIComponent(q.name)}`, 'aria-label': `Dead letters in ${q.name}: ${q.counts.dead || 0}` },
            String(q.counts.dead || 0))
          // A capped state's count is a lower bound: "n+".
          : h('span', { class: q.counts[s] ? '' : 'muted' }, atLeast(q.counts[s], (q.counts_capped || []).includes(s))))),
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
      charts(activity.items),
      history.el,
      h('section', { 'aria-labelledby': 'queues-title' },
        h('h2', { id: 'queues-title' }, 'Queues'),
        h('div', { class: 'scroll' }, table('Queues with their task counts by state', headers, rows, 'No queue holds tasks yet.'))),
      sinks,
      h('p', { class: 'muted small' }, 'Updated ', fmtClockSeconds(),
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

// charts: throughput (tasks succeeded a minute) and failure rate (failed
// attempts of all finished ones, a minute) over the last hour, drawn as
// inline SVG from GET /v1/activity (counted on the server). Each chart is an
// image with a text summary for screen readers; its numbers are also in
// the title of each bar or point (text, never markup). The history beyond
// the hour is activity.js's.

function charts(items) {
  const W = 600, H = 120, n = items.length || 1, bw = W / n;
  const hhmm = fmtClock;
  const ok = items.map((m) => m.succeeded);
  const total = ok.reduce((a, b) => a + b, 0);
  const peak = Math.max(1, ...ok);
  const bars = svg('svg', { viewBox: `0 0 ${W} ${H + 16}`, class: 'chart', role: 'img', id: 'chart-throughput',
    'data-total': total, 'aria-label': `Throughput: ${total} tasks succeeded in the last hour, at most ${Math.max(0, ...ok)} in a minute` },
  svg('line', { x1: 0, y1: H, x2: W, y2: H, class: 'axis' }),
  ...items.map((m, i) => {
    const bh = (m.succeeded / peak) * (H - 4);
    return svg('rect', { x: i * bw + 1, y: H - bh, width: Math.max(bw - 2, 1), height: bh, class: 'bar' },
      svg('title', {}, `${hhmm(m.minute)}: ${m.succeeded} succeeded`));
  }),
  svg('text', { x: 2, y: 12, class: 'label' }, `${peak}/min`),
  svg('text', { x: 2, y: H + 14, class: 'label' }, items.length ? hhmm(items[0].minute) : ''),
  svg('text', { x: W - 2, y: H + 14, class: 'label', 'text-anchor': 'end' }, 'now'));

  const failed = items.reduce((a, m) => a + m.failed, 0);
  const dead = items.reduce((a, m) => a + m.dead, 0);
  const rate = (m) => (m.succeeded + m.failed ? m.failed / (m.succeeded + m.failed) : null);
  const pts = items.map((m, i) => [i * bw + bw / 2, rate(m)]).filter(([, r]) => r !== null);
  const overall = total + failed ? Math.round((failed / (total + failed)) * 1000) / 10 : 0;
  const line = svg('svg', { viewBox: `0 0 ${W} ${H + 16}`, class: 'chart', role: 'img', id: 'chart-failures',
    'data-failed': failed, 'data-dead': dead,
    'aria-label': `Failure rate: ${overall}% of ${total + failed} finished attempts failed in the last hour (${failed} failed, ${dead} dead letters)` },
  svg('line', { x1: 0, y1: H, x2: W, y2: H, class: 'axis' }),
  svg('line', { x1: 0, y1: H / 2, x2: W, y2: H / 2, class: 'grid' }),
  pts.length > 1 ? svg('polyline', { class: 'rate', points: pts.map(([x, r]) => `${x},${H - r * (H - 4)}`).join(' ') }) : '',
  ...items.map((m, i) => (rate(m) === null ? null : svg('circle', { cx: i * bw + bw / 2, cy: H - rate(m) * (H - 4), r: 2.5, class: 'point' },
    svg('title', {}, `${hhmm(m.minute)}: ${m.failed} failed of ${m.succeeded + m.failed} (${Math.round(rate(m) * 100)}%), ${m.dead} dead`)))).filter(Boolean),
  svg('text', { x: 2, y: 12, class: 'label' }, '100%'),
  svg('text', { x: 2, y: H / 2 - 2, class: 'label' }, '50%'),
  svg('text', { x: 2, y: H + 14, class: 'label' }, items.length ? hhmm(items[0].minute) : ''),
  svg('text', { x: W - 2, y: H + 14, class: 'label', 'text-anchor': 'end' }, 'now'));
  return h('section', { class: 'charts', 'aria-labelledby': 'charts-title' },
    h('h2', { id: 'charts-title' }, 'Last hour'),
    h('div', { class: 'chart-row' },
      h('figure', { class: 'card' }, h('figcaption', {}, `Throughput: ${total} succeeded`), bars),
      h('figure', { class: 'card' }, h('figcaption', {}, `Failure rate: ${overall}% (${failed} failed attempts, ${dead} dead)`), line)));
}
