import { subscribe } from './livestream.js';

// Shared helpers: the API client (session cookie + CSRF header), DOM
// building that only ever makes text nodes from data, and formatting.

let session = null; // {name, role, csrf, dev}

export function getSession() { return session; }
export function setSession(s) { session = s; }

const ranks = { viewer: 1, operator: 2, admin: 3 };
// can: the signed-in role includes role. The UI hides what it may not do;
// the server decides anyway.
export function can(role) { return !!session && (ranks[session.role] || 0) >= ranks[role]; }

export class APIError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let onUnauthenticated = () => {};
export function whenSignedOut(fn) { onUnauthenticated = fn; }

// api calls the /v1 API (or the console's session endpoints) as the
// signed-in session: the cookie goes along by itself, the CSRF token in a
// header on anything but GET. Every write says Content-Type:
// application/json, a body or not (the server refuses other types).
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const opts = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET') headers['Content-Type'] = 'application/json';
  if (body !== undefined) opts.body = JSON.stringify(body);
  if (method !== 'GET' && session && session.csrf) headers['X-Backstop-CSRF'] = session.csrf;
  return answer(path, await fetch(path, opts));
}

// booted answers a GET whose answer the server put in the page (the
// #backstop-boot data block: the session and the end of the event log, as
// they were when it served the page, console.go), as api would; once (a
// later call reads afresh). One it left out (nobody signed in) is read.
let given = null;
export async function booted(path) {
  if (given === null) {
    try { given = JSON.parse(document.getElementById('backstop-boot').textContent) || {}; } catch { given = {}; }
  }
  if (!Object.hasOwn(given, path)) return api('GET', path);
  const v = given[path];
  delete given[path];
  return v;
}

async function answer(path, r) {
  if (r.status === 204) return null;
  let data = null;
  const ct = r.headers.get('Content-Type') || '';
  if (ct.includes('json')) data = await r.json();
  if (!r.ok) {
    if (r.status === 401 && !path.startsWith('/console/session')) onUnauthenticated();
    throw new APIError(r.status, data);
  }
  return data;
}

// h builds an element. attrs: properties/attributes ("on…" keys are
// listeners); children: nodes, or anything else as text (never HTML).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function flash(msg, kind = 'ok') {
  const f = document.getElementById('flash');
  clear(f, h('p', { class: `flash ${kind}` }, msg));
}

export function errorText(e) {
  if (e instanceof APIError) {
    const p = e.problem || {};
    return `${e.status} ${p.code || ''}: ${p.detail || p.title || e.message}`;
  }
  return String(e && e.message ? e.message : e);
}

// pretty renders JSON for a <pre> (as text).
export function pretty(v) {
  if (v === undefined) return '';
  try { return JSON.stringify(v, null, 2); } catch { return String(v); }
}

// Times are shown in local time as 2026-11-27 14:03:09 (fmtTime), 14:03:09
// (fmtClockSeconds) and 14:03 (fmtClock): one format in every locale,
// sortable, and written from the Date's fields. The Intl formatters
// (toLocaleString) cost a page its first call's locale data — tens of
// milliseconds before a list could show, more than all else it renders —
// and a new formatter on every call after.
const pad = (n) => (n < 10 ? `0${n}` : String(n));
const hhmm = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}`;
const hhmmss = (d) => `${hhmm(d)}:${pad(d.getSeconds())}`;

export function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  if (isNaN(d)) return String(s);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hhmmss(d)}`;
}

export function fmtClock(at) { return hhmm(new Date(at)); }

export function fmtClockSeconds(at = Date.now()) { return hhmmss(new Date(at)); }

// fmtDayClock: a weekday and hours and minutes (Mon 14:03).
const days = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
export function fmtDayClock(at) {
  const d = new Date(at);
  return `${days[d.getDay()]} ${hhmm(d)}`;
}

export function fmtAge(ms) {
  if (ms < 0 || !isFinite(ms)) return '';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hh = Math.floor(m / 60);
  if (hh < 48) return `${hh}h ${m % 60}m`;
  return `${Math.floor(hh / 24)}d ${hh % 24}h`;
}

export function fmtDuration(start, end) {
  if (!start || !end) return '';
  const ms = new Date(end) - new Date(start);
  if (ms < 1000) return `${ms} ms`;
  return fmtAge(ms);
}

export function badge(text, cls) {
  return h('span', { class: `badge ${cls || text}` }, text);
}

// table: a labelled table from column headers and rows of cells (cls: the
// table's class; 'list' keeps each row to one line).
// A row's attrs (optional) are its tr's attributes (data-* to find it).
export function table(caption, headers, rows, empty = 'Nothing here.', cls) {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return h('table', { class: cls },
    h('caption', { class: 'sr-only' }, caption),
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows.map((r) => h('tr', r.attrs || {}, r.map((c) => h('td', {}, c))))));
}

// field: a labelled form control.
export function field(label, control) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  control.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), control);
}

// live follows an event stream (livestream.js: one connection per
// browser, shared by its tabs) for the page
// rendered into view: at most one stream is open, the current page's. A
// page that is not shown yet gets its stream when the router shows it
// (showLive); a page re-rendering itself keeps its open stream.
// after (optional) is the cursor the stream resumes behind ('' from the
// start of the log); without it, the page's stream starts where the log
// ended just before the page read its data (view._end, taken by the
// router: nothing between the read and the stream is missed, and the
// log's history is never read), else at the end of the log ('end').
let current = null; // {view, stream, after, onEvent, close}
export function live(view, stream, onEvent, after) {
  if (after === undefined) after = view._end !== undefined ? view._end : 'end';
  view._live = { stream, onEvent, after };
  if (current && current.view === view && current.stream === stream && current.after === after) {
    current.onEvent = onEvent;
    return;
  }
  if (view.isConnected) showLive(view);
}

export function showLive(view) {
  stopLive();
  if (!view._live) return;
  const cur = { view, stream: view._live.stream, after: view._live.after, onEvent: view._live.onEvent, close: null };
  cur.close = subscribe(cur.stream, cur.after, (data) => { if (current === cur) cur.onEvent(data); });
  current = cur;
}

// endCursor: the end of the event log now (one indexed read on the
// server: GET /v1/events?after=end); 'end' when it cannot be read, so the
// stream itself starts at the end.
export async function endCursor() {
  try {
    const p = await booted('/v1/events?after=end&limit=1');
    return p.next_cursor;
  } catch {
    return 'end';
  }
}

// liveOpen: whether view's stream is the open one.
export function liveOpen(view) { return !!current && current.view === view; }

export function stopLive() {
  if (current) current.close();
  current = null;
}

// debounce: at most one call per wait, the last one wins.
export function debounce(fn, wait) {
  let t = null;
  return (...a) => {
    if (t) return;
    t = setTimeout(() => { t = null; fn(...a); }, wait);
  };
}

// A flash set just before a navigation (flashNext) survives the router's
// clearing of the old page's message once (clearFlash).
let keepFlash = false;
export function flashNext(msg, kind = 'ok') {
  flash(msg, kind);
  keepFlash = true;
}
export function clearFlash() {
  if (keepFlash) {
    keepFlash = false;
    return;
  }
  clear(document.getElementById('flash'));
}

// shortId: an id as a link (href) or text, shortened past 14 characters
// (the whole id in its title and aria-label), with a copy button.
export function shortId(id, href, cls = '') {
  id = String(id ?? '');
  // A UUIDv7 differs at its end; a workflow step's task id keeps its step.
  const cut = (x) => (x.length > 14 ? `${x.slice(0, 4)}…${x.slice(-8)}` : x);
  const dot = id.indexOf('.');
  const shown = dot > 14 ? `${cut(id.slice(0, dot))}${id.slice(dot)}` : cut(id);
  const label = h(href ? 'a' : 'span', { href, class: `mono ${cls}`.trim(), title: id, 'aria-label': id, dataset: { id } }, shown);
  return h('span', { class: 'id' }, label, copyButton(id, `Copy ${id}`));
}

// copyButton copies text to the clipboard and says so on the button
// (data-copied); where the Clipboard API is refused it selects the text in
// a scratch box and copies that.
export function copyButton(text, label = 'Copy') {
  const b = h('button', { type: 'button', class: 'copy', title: label, 'aria-label': label }, 'copy');
  b.addEventListener('click', async (ev) => {
    ev.preventDefault();
    ev.stopPropagation();
    const value = typeof text === 'function' ? text() : text;
    let ok = false;
    try {
      await navigator.clipboard.writeText(value);
      ok = true;
    } catch {
      const ta = h('textarea', { class: 'sr-only', readonly: true });
      ta.value = value;
      document.body.append(ta);
      ta.select();
      try { ok = document.execCommand('copy'); } catch { ok = false; }
      ta.remove();
    }
    b.dataset.copied = ok ? 'true' : 'false';
    b.textContent = ok ? 'copied' : 'not copied';
    setTimeout(() => { b.textContent = 'copy'; }, 1500);
  });
  return b;
}

// jsonBlock: a JSON value in a collapsible block (open unless it is longer
// than openUnder characters) with a copy button; text only.
export function jsonBlock(value, { id, title, note, openUnder = 2000, extra } = {}) {
  const text = pretty(value);
  const pre = h('pre', { class: 'json', id, tabindex: '0' }, text);
  const d = h('details', { class: 'json-block', open: text.length <= openUnder, dataset: { bytes: String(text.length) } },
    h('summary', {}, h('span', { class: 'json-title' }, title || 'JSON'), note ? [' ', note] : null,
      h('span', { class: 'muted small' }, ` ${text.length} characters`), ' ', copyButton(() => pre.textContent, `Copy ${title || 'JSON'}`), extra ? [' ', extra] : null),
    pre);
  return d;
}

// panel: a collapsible section whose open state the browser remembers
// (localStorage, per id); closed unless remembered open or forced.
export function panel(id, summary, content, { open = false } = {}) {
  const key = `backstop.panel.${id}`;
  let saved = null;
  try { saved = localStorage.getItem(key); } catch { /* no storage */ }
  const d = h('details', { class: 'panel', id, open: open || saved === 'open' }, h('summary', {}, summary), content);
  d.addEventListener('toggle', () => {
    try { localStorage.setItem(key, d.open ? 'open' : 'closed'); } catch { /* no storage */ }
  });
  return d;
}

// atLeast is a count as shown: n, or "n+" when it is a lower bound (a
// state the server counted among its newest tasks only: GET /v1/queues'
// counts_capped, GET /v1/counts' tasks_capped).
export function atLeast(n, capped) { return `${n || 0}${capped ? '+' : ''}`; }

// stateTabs: links to the list narrowed to each state, with the count
// the server gives (GET /v1/counts: countsURL(queue)); the tab of the
// current state is marked. pick(c) picks the numbers from the answer;
// initial is the answer (or its promise: the page shows its list without
// waiting for the counts) the page asked for with its list. The counts are
// read again every few seconds while the tabs are shown.
export function countsURL(queue) { return `/v1/counts${queue ? `?${new URLSearchParams({ queue })}` : ''}`; }

export function stateTabs(id, tabs, current, link, pick, queue, initial) {
  const nav = h('nav', { class: 'tabs', id, 'aria-label': 'States' },
    tabs.map((s) => h('a', { href: link(s), 'aria-current': s === current ? 'page' : null, dataset: { state: s } },
      s || 'all', ' ', h('span', { class: 'count', dataset: { state: s } }))));
  const show = (c) => {
    const n = pick(c);
    for (const el of nav.querySelectorAll('.count')) {
      const v = n[el.dataset.state];
      el.textContent = v === undefined ? '' : String(v);
    }
  };
  Promise.resolve(initial).then(show, () => { /* the next round tries again */ });
  let waits = 0; // rounds before the page was shown
  const loop = () => setTimeout(async () => {
    if (!nav.isConnected) {
      if (!nav.dataset.shown && waits++ < 10) loop();
      return;
    }
    nav.dataset.shown = 'true';
    try { show(await api('GET', countsURL(queue))); } catch { /* the next round tries again */ }
    loop();
  }, 3000);
  loop();
  return nav;
}

// sortSelect: newest or oldest first, as the list's order parameter.
export function sortSelect(id, order, onChange) {
  const s = h('select', { id, name: 'order', 'aria-label': 'Sort' },
    h('option', { value: 'newest', selected: order === 'newest' }, 'Newest first'),
    h('option', { value: 'oldest', selected: order === 'oldest' }, 'Oldest first'));
  s.addEventListener('change', () => onChange(s.value));
  return s;
}
