// A workflow run as a graph (issue 16): one box per step, in columns by
// depth (a step sits right of every step it needs), compensation steps in
// a row of their own below, joined by dashed lines to the steps they undo.
// Each box shows the step's id, kind and state (a fan-out step: its items)
// and links to its task; colours follow the state (style.css, .wf-*).
// Everything is SVG built with createElementNS and text nodes: a step id
// or kind is never markup.

const NS = 'http://www.w3.org/2000/svg';
const W = 168; // box width
const H = 52; // box height
const GX = 56; // horizontal gap
const GY = 20; // vertical gap

function el(tag, attrs, ...children) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// fit shortens a label (with an ellipsis) to what fits in max pixels of
// the box's font, measured on a canvas (the box's title holds it whole).
// The canvas is made at the first measure, not when the module loads: a
// 2D context costs tens of milliseconds every page would pay before it
// reads its data.
let measure = null;
const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
export function fit(s, px, weight, max) {
  s = String(s ?? '');
  measure ??= document.createElement('canvas').getContext('2d');
  measure.font = `${weight} ${px}px ${FONT}`;
  if (measure.measureText(s).width <= max) return s;
  let lo = 0;
  let hi = s.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (measure.measureText(`${s.slice(0, mid)}…`).width <= max) lo = mid;
    else hi = mid - 1;
  }
  return `${s.slice(0, lo)}…`;
}

// layout gives each step a column (its depth: 0 without needs, else one
// more than its deepest need) and a row within the column; compensation
// steps go in a last row, under the step they undo when it is known.
function layout(steps) {
  const byId = new Map(steps.map((s) => [s.id, s]));
  const depth = new Map();
  const depthOf = (s, seen = new Set()) => {
    if (depth.has(s.id)) return depth.get(s.id);
    if (seen.has(s.id)) return 0; // a cycle cannot be registered; be safe anyway
    seen.add(s.id);
    let d = 0;
    for (const n of s.needs || []) {
      const ns = byId.get(n);
      if (ns) d = Math.max(d, depthOf(ns, seen) + 1);
    }
    depth.set(s.id, d);
    return d;
  };
  const normal = steps.filter((s) => !s.compensation);
  const comps = steps.filter((s) => s.compensation);
  const cols = [];
  for (const s of normal) {
    const d = depthOf(s);
    (cols[d] = cols[d] || []).push(s);
  }
  const pos = new Map();
  let rows = 0;
  cols.forEach((col, x) => col.forEach((s, y) => {
    pos.set(s.id, { x, y });
    rows = Math.max(rows, y + 1);
  }));
  // Compensations: under the step that names them, else in order.
  const undoes = new Map();
  for (const s of normal) if (s.compensate) undoes.set(s.compensate, s.id);
  const taken = new Set();
  let next = 0;
  for (const c of comps) {
    const owner = pos.get(undoes.get(c.id) || '');
    let x = owner ? owner.x : next;
    while (taken.has(x)) x++;
    taken.add(x);
    next = x + 1;
    pos.set(c.id, { x, y: rows, comp: true });
  }
  const width = Math.max(cols.length, next, 1);
  return { pos, width, height: rows + (comps.length ? 1 : 0), undoes };
}

// stepGraph draws the run's steps; it answers null when there are none.
export function stepGraph(run) {
  const steps = Array.isArray(run.steps) ? run.steps : [];
  if (!steps.length) return null;
  const { pos, width, height, undoes } = layout(steps);
  const px = (p) => p.x * (W + GX) + 8;
  const py = (p) => p.y * (H + GY) + (p.comp ? GY : 0) + 8;
  const svg = el('svg', {
    id: 'run-graph', class: 'wf-graph', role: 'group',
    'aria-label': `Steps of workflow ${run.workflow || ''} run ${run.run_id || ''}: each links to its task`,
    viewBox: `0 0 ${width * (W + GX) - GX + 16} ${height * (H + GY) + (height ? GY : 0) + 16}`,
    width: String(width * (W + GX) - GX + 16),
  });
  svg.append(el('defs', {}, el('marker', { id: 'wf-arrow', viewBox: '0 0 8 8', refX: '8', refY: '4',
    markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' }, el('path', { d: 'M0,0 L8,4 L0,8 z', class: 'wf-arrowhead' }))));
  // Edges first, under the boxes.
  for (const s of steps) {
    const to = pos.get(s.id);
    for (const n of s.needs || []) {
      const from = pos.get(n);
      if (!from || !to) continue;
      svg.append(el('path', { class: 'wf-edge', 'marker-end': 'url(#wf-arrow)',
        d: `M${px(from) + W},${py(from) + H / 2} C${px(from) + W + GX / 2},${py(from) + H / 2} ${px(to) - GX / 2},${py(to) + H / 2} ${px(to)},${py(to) + H / 2}` }));
    }
    if (s.compensation) {
      const owner = pos.get(undoes.get(s.id) || '');
      if (owner && to) {
        svg.append(el('path', { class: 'wf-edge wf-undo', d: `M${px(owner) + W / 2},${py(owner) + H} L${px(to) + W / 2},${py(to)}` }));
      }
    }
  }
  for (const s of steps) {
    const p = pos.get(s.id);
    if (!p) continue;
    const state = String(s.state || 'waiting');
    const items = Array.isArray(s.items) ? s.items : [];
    const task = s.task_id || (items[0] && items[0].task_id) || '';
    const detail = items.length ? `${state} · ${items.length} items` : state;
    const label = `step ${s.id}${s.compensation ? ' (compensation)' : ''}: ${detail}${s.attempts ? `, ${s.attempts} attempts` : ''}`;
    const box = el('g', { class: `wf-node wf-${state.replace(/\s+/g, '-')}${s.compensation ? ' wf-comp' : ''}`, 'data-step': s.id, 'data-state': state },
      el('title', {}, s.error ? `${label} — ${s.error}` : label),
      el('rect', { x: px(p), y: py(p), width: W, height: H, rx: 8, ry: 8 }),
      el('text', { x: px(p) + 10, y: py(p) + 20, class: 'wf-id' }, fit(s.id, 13, 600, W - 20)),
      el('text', { x: px(p) + 10, y: py(p) + 40, class: 'wf-state' }, fit(`${detail} · ${s.kind || ''}`, 12, 400, W - 20)));
    if (task) {
      svg.append(el('a', { href: `#/tasks/${encodeURIComponent(task)}`, 'aria-label': label, class: 'wf-link' }, box));
    } else {
      box.setAttribute('role', 'img');
      box.setAttribute('aria-label', label);
      svg.append(box);
    }
  }
  return svg;
}
