// History beyond the hour: throughput, failure rate and wait/run latency
// (p50/p95) over 24 h (five-minute buckets) or 7 d (hourly buckets), per
// queue and kind, drawn as inline SVG from GET /v1/activity?window= (the
// activity rollup the maintenance leader writes). Each chart is an image
// with a text summary for screen readers; its numbers are also in the
// title of each bar or point (text, never markup).
import { api, h, clear, errorText, fmtTime, fmtClock, fmtDayClock, table } from './lib.js';

const svgNS = 'http://www.w3.org/2000/svg';
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// The window shown, kept while the console is open (the overview redraws
// on every event).
let chosen = '24h';
const windows = [['24h', '24 h'], ['7d', '7 d']];

// historyPanel is the history of every queue, or of one: a container
// that keeps what it shows while it reads again (refresh), so a page that
// redraws on events never blanks it; the toggle reads the other window.
export function historyPanel({ queue } = {}) {
  const box = h('div', { id: 'history-panel' }, h('p', { class: 'muted' }, 'Loading the history…'));
  let latest = 0; // only the last read started is shown
  const load = async () => {
    const n = ++latest;
    const params = new URLSearchParams({ window: chosen });
    if (queue) params.set('queue', queue);
    let shown;
    try {
      shown = historySection(await api('GET', `/v1/activity?${params}`), queue, load);
    } catch (e) {
      shown = h('p', { class: 'error', role: 'alert' }, `History: ${errorText(e)}`);
    }
    if (n === latest) clear(box, shown);
  };
  load();
  return { el: box, refresh: load };
}

function historySection(rep, queue, reload) {
  const section = h('section', { class: 'charts history', id: 'history', 'aria-labelledby': 'history-title', 'data-window': rep.window },
    h('h2', { id: 'history-title' }, `History: last ${rep.window === '7d' ? '7 days' : '24 hours'}`),
    h('div', { class: 'toggle', role: 'group', 'aria-label': 'History window' },
      ...windows.map(([w, label]) => h('button', {
        type: 'button', class: 'small', id: `history-${w}`, 'aria-pressed': String(w === rep.window),
        onclick: () => {
          chosen = w;
          reload();
        },
      }, label))),
    h('div', { class: 'chart-row' },
      h('figure', { class: 'card' }, h('figcaption', {}, `Throughput: ${rep.totals.succeeded} succeeded, ${rep.totals.failed} failed attempts`), throughput(rep)),
      h('figure', { class: 'card' }, h('figcaption', {}, `Failure rate: ${pct(rep.totals.failure_rate)} (${rep.totals.retried} retried, ${rep.totals.dead} dead)`), failures(rep)),
      h('figure', { class: 'card' }, h('figcaption', {}, `Latency: wait p50 ${ms(rep.totals.wait_p50_ms)}, run p50 ${ms(rep.totals.run_p50_ms)}`), latency(rep))),
    groups(rep, queue),
    h('p', { class: 'muted small' }, rep.rolled_up_to
      ? `Rolled up to ${fmtTime(rep.rolled_up_to)}; work finished since is counted on the maintenance leader's next round.`
      : 'Not rolled up yet: the maintenance leader writes this history.'));
  return section;
}

const W = 600, H = 120;

// A week's points say their day too.
function label(rep, at) {
  return rep.window === '7d' ? fmtDayClock(at) : fmtClock(at);
}

function pct(r) { return r === null || r === undefined ? '—' : `${Math.round(r * 1000) / 10}%`; }
function ms(v) {
  if (v === null || v === undefined) return '—';
  if (v >= 60000) return `${Math.round(v / 6000) / 10} min`;
  if (v >= 1000) return `${Math.round(v / 100) / 10} s`;
  return `${Math.round(v * 10) / 10} ms`;
}

function axes(rep) {
  const s = rep.series;
  return [
    svg('line', { x1: 0, y1: H, x2: W, y2: H, class: 'axis' }),
    svg('text', { x: 2, y: H + 14, class: 'label' }, s.length ? label(rep, s[0].at) : ''),
    svg('text', { x: W - 2, y: H + 14, class: 'label', 'text-anchor': 'end' }, 'now'),
  ];
}

// throughput: succeeded (bars) with the failed attempts stacked on them.
function throughput(rep) {
  const s = rep.series, bw = W / (s.length || 1);
  const peak = Math.max(1, ...s.map((p) => p.succeeded + p.failed));
  const per = rep.window === '7d' ? 'h' : '5 min';
  return svg('svg', { viewBox: `0 0 ${W} ${H + 16}`, class: 'chart', role: 'img', id: 'history-throughput',
    'data-total': rep.totals.succeeded, 'data-failed': rep.totals.failed, 'data-points': s.length,
    'aria-label': `Throughput over ${rep.window}: ${rep.totals.succeeded} tasks succeeded and ${rep.totals.failed} attempts failed, at most ${Math.max(0, ...s.map((p) => p.succeeded))} succeeded in a bucket` },
  ...axes(rep),
  ...s.flatMap((p, i) => {
    if (!p.succeeded && !p.failed) return [];
    const ok = (p.succeeded / peak) * (H - 4), bad = (p.failed / peak) * (H - 4);
    const title = `${label(rep, p.at)}: ${p.succeeded} succeeded, ${p.failed} failed (${p.retried} retried), ${p.dead} dead`;
    return [
      svg('rect', { x: i * bw, y: H - ok, width: Math.max(bw - 0.5, 0.5), height: ok, class: 'bar' }, svg('title', {}, title)),
      p.failed ? svg('rect', { x: i * bw, y: H - ok - bad, width: Math.max(bw - 0.5, 0.5), height: bad, class: 'bar failed' }, svg('title', {}, title)) : null,
    ].filter(Boolean);
  }),
  svg('text', { x: 2, y: 12, class: 'label' }, `${peak}/${per}`));
}

// failures: the failure rate of each bucket with attempts (a line).
function failures(rep) {
  const s = rep.series, bw = W / (s.length || 1);
  const pts = s.map((p, i) => [i, p]).filter(([, p]) => p.failure_rate !== null);
  const y = (r) => H - r * (H - 4);
  return svg('svg', { viewBox: `0 0 ${W} ${H + 16}`, class: 'chart', role: 'img', id: 'history-failures',
    'data-rate': rep.totals.failure_rate === null ? '' : rep.totals.failure_rate, 'data-dead': rep.totals.dead,
    'aria-label': `Failure rate over ${rep.window}: ${pct(rep.totals.failure_rate)} of ${rep.totals.succeeded + rep.totals.failed} finished attempts failed (${rep.totals.failed} failed, ${rep.totals.retried} retried, ${rep.totals.dead} dead letters)` },
  ...axes(rep),
  svg('line', { x1: 0, y1: H / 2, x2: W, y2: H / 2, class: 'grid' }),
  pts.length > 1 ? svg('polyline', { class: 'rate', points: pts.map(([i, p]) => `${i * bw + bw / 2},${y(p.failure_rate)}`).join(' ') }) : '',
  ...pts.map(([i, p]) => svg('circle', { cx: i * bw + bw / 2, cy: y(p.failure_rate), r: 2, class: 'point' },
    svg('title', {}, `${label(rep, p.at)}: ${p.failed} failed of ${p.succeeded + p.failed} (${pct(p.failure_rate)}), ${p.dead} dead`))),
  svg('text', { x: 2, y: 12, class: 'label' }, '100%'),
  svg('text', { x: 2, y: H / 2 - 2, class: 'label' }, '50%'));
}

// latency: wait and run, p50 and p95, one line each, on a shared scale.
const lines = [['wait_p50_ms', 'wait p50', 'lat wait'], ['wait_p95_ms', 'wait p95', 'lat wait p95'],
  ['run_p50_ms', 'run p50', 'lat run'], ['run_p95_ms', 'run p95', 'lat run p95']];
function latency(rep) {
  const s = rep.series, bw = W / (s.length || 1);
  const peak = Math.max(1, ...s.flatMap((p) => lines.map(([k]) => p[k] || 0)));
  const y = (v) => H - (v / peak) * (H - 4);
  const t = rep.totals;
  return svg('svg', { viewBox: `0 0 ${W} ${H + 16}`, class: 'chart', role: 'img', id: 'history-latency',
    'data-wait-p50': t.wait_p50_ms ?? '', 'data-run-p50': t.run_p50_ms ?? '', 'data-run-p95': t.run_p95_ms ?? '',
    'aria-label': `Latency over ${rep.window}: wait p50 ${ms(t.wait_p50_ms)}, p95 ${ms(t.wait_p95_ms)}; run p50 ${ms(t.run_p50_ms)}, p95 ${ms(t.run_p95_ms)}` },
  ...axes(rep),
  ...lines.flatMap(([k, name, cls]) => {
    const pts = s.map((p, i) => [i, p]).filter(([, p]) => p[k] !== null);
    return [
      pts.length > 1 ? svg('polyline', { class: cls, points: pts.map(([i, p]) => `${i * bw + bw / 2},${y(p[k])}`).join(' ') }) : null,
      ...pts.map(([i, p]) => svg('circle', { cx: i * bw + bw / 2, cy: y(p[k]), r: 1.8, class: `${cls} point-lat` },
        svg('title', {}, `${label(rep, p.at)}: ${name} ${ms(p[k])}`))),
    ].filter(Boolean);
  }),
  svg('text', { x: 2, y: 12, class: 'label' }, ms(peak)),
  svg('text', { x: W - 2, y: 12, class: 'label', 'text-anchor': 'end' }, 'wait p50/p95 · run p50/p95'));
}

// groups: the window's queue × kind pairs, busiest first.
function groups(rep, queue) {
  const rows = rep.groups.map((g) => [
    queue ? g.queue : h('a', { href: `#/queues/${encodeURIComponent(g.queue)}` }, g.queue),
    g.kind, String(g.succeeded), String(g.failed), String(g.retried), String(g.dead), pct(g.failure_rate),
    `${ms(g.wait_p50_ms)} / ${ms(g.wait_p95_ms)}`, `${ms(g.run_p50_ms)} / ${ms(g.run_p95_ms)}`,
  ]);
  const t = table(`By queue and kind over ${rep.window}`, ['Queue', 'Kind', 'Succeeded', 'Failed', 'Retried', 'Dead', 'Failure rate',
    'Wait p50 / p95', 'Run p50 / p95'], rows, 'No finished work in this window yet.', 'list');
  t.id = 'history-groups';
  return h('div', { class: 'scroll' }, t);
}
