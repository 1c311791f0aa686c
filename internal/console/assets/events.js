// Events: the event log followed live (Server-Sent Events), one stream at
// a time: all, type.T, task.ID, queue.Q, run.R, worker.W, execution.E or
// node.H; pause; resume behind a cursor.
import { api, h, clear, fmtTime, field, errorText, live, stopLive } from './lib.js';

const kinds = [
  ['all', 'all events'], ['type', 'type (e.g. task.failed)'], ['task', 'task id'], ['queue', 'queue'],
  ['run', 'run id'], ['worker', 'worker id'], ['execution', 'execution id'], ['node', 'node (host)'],
];
// maxShown: the newest events kept on screen.
const maxShown = 500;

function splitStream(s) {
  if (!s || s === 'all') return ['all', ''];
  const i = s.indexOf('.');
  if (i < 0) return ['all', ''];
  return [s.slice(0, i), s.slice(i + 1)];
}

function subjectLink(e) {
  if (!e.subject) return '';
  if (e.type.startsWith('worker.')) return h('a', { href: `#/workers/${encodeURIComponent(e.subject)}`, class: 'mono' }, e.subject);
  if (e.type.startsWith('task.') || e.type.startsWith('dlq.')) return h('a', { href: `#/tasks/${encodeURIComponent(e.subject)}`, class: 'mono' }, e.subject);
  return h('span', { class: 'mono' }, e.subject);
}

function attrsText(a) {
  return Object.keys(a || {}).sort().map((k) => `${k}=${a[k]}`).join(', ');
}

export async function eventsPage(main, q) {
  const stream = q.get('stream') || 'all';
  // The page follows the log from its end (what happens from now on);
  // "from the start" (after= empty) replays the whole log first.
  const fromStart = q.has('after') && q.get('after') === '';
  const after = q.get('after') || '';
  const [kind, name] = splitStream(stream);
  // Check the stream and cursor first: a bad one is a problem document,
  // shown as text (an EventSource would only say "error").
  let problem = null;
  try {
    const qs = new URLSearchParams({ stream, limit: '1' });
    if (after) qs.set('after', after);
    await api('GET', `/v1/events?${qs}`);
  } catch (e) {
    problem = errorText(e);
  }
  const f = {
    kind: h('select', { id: 'ev-kind', name: 'kind' }, kinds.map(([k, label]) => h('option', { value: k, selected: k === kind }, label))),
    name: h('input', { id: 'ev-name', name: 'name', value: name, placeholder: 'name or id', spellcheck: 'false' }),
    cursor: h('input', { id: 'ev-cursor', name: 'after', value: after, class: 'mono', spellcheck: 'false', autocomplete: 'off' }),
  };
  const pick = h('form', { class: 'filters', id: 'events-stream', role: 'search', 'aria-label': 'Choose the event stream' },
    field('Stream', f.kind), field('Name or id', f.name), h('button', { type: 'submit' }, 'Follow'));
  pick.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const s = f.kind.value === 'all' ? 'all' : `${f.kind.value}.${f.name.value.trim()}`;
    location.hash = `#/events?${new URLSearchParams({ stream: s })}`;
  });
  const tbody = h('tbody', { id: 'events-rows' });
  const list = h('table', { id: 'events-list', 'data-count': '0' },
    h('caption', { class: 'sr-only' }, `Events of stream ${stream}, newest first`),
    h('thead', {}, h('tr', {}, ['Time', 'Type', 'Subject', 'Queue', 'Kind', 'Attributes', 'Actor', 'Body', 'Cursor']
      .map((x) => h('th', { scope: 'col' }, x)))),
    tbody);
  const status = h('p', { id: 'events-status', role: 'status', 'aria-live': 'polite', class: 'muted small' });
  let last = after; // the cursor of the last event shown
  let n = 0;
  const onEvent = (e) => {
    if (e.cursor) last = e.cursor;
    tbody.prepend(h('tr', { 'data-cursor': e.cursor || '' },
      h('td', {}, h('time', { datetime: e.time }, fmtTime(e.time))),
      h('td', {}, h('strong', {}, e.type)),
      h('td', {}, subjectLink(e)),
      h('td', {}, e.queue || ''),
      h('td', {}, e.kind || ''),
      h('td', {}, attrsText(e.attributes)),
      h('td', {}, e.actor || ''),
      h('td', {}, e.body && Object.keys(e.body).length ? h('code', { class: 'body' }, JSON.stringify(e.body)) : ''),
      h('td', {}, h('span', { class: 'mono small' }, e.cursor || ''))));
    while (tbody.children.length > maxShown) tbody.lastElementChild.remove();
    n++;
    list.dataset.count = String(n);
  };
  const pauseBtn = h('button', { type: 'button', id: 'events-pause' }, 'Pause');
  const resumeBtn = h('button', { type: 'submit', id: 'events-resume', class: 'primary' }, 'Resume');
  const resume = h('form', { class: 'filters', id: 'events-resume-form', 'aria-label': 'Pause or resume the stream' },
    pauseBtn, field('Resume after cursor (empty: from the start of the log; end: from now)', f.cursor), resumeBtn);
  const startLink = h('a', { id: 'events-from-start', href: `#/events?${new URLSearchParams({ stream, after: '' })}` }, 'from the start of the log');
  const endLink = h('a', { id: 'events-from-end', href: `#/events?${new URLSearchParams({ stream })}` }, 'from now on');
  let following = fromStart ? 'start' : after ? 'cursor' : 'end';
  const setStatus = (paused) => {
    pauseBtn.disabled = paused;
    resumeBtn.disabled = !paused;
    main.dataset.paused = paused ? 'true' : 'false';
    main.dataset.from = following;
    if (paused) {
      clear(status, `Paused${last ? ` after ${last}` : ''}: nothing new is shown until you resume.`);
    } else if (following === 'end') {
      clear(status, `Live: following ${stream} from now on. Show the events `, startLink, '.');
    } else if (following === 'start') {
      clear(status, `Live: following ${stream} from the start of the log. Follow `, endLink, ' instead.');
    } else {
      clear(status, `Live: following ${stream} after a cursor. Follow `, endLink, ' instead.');
    }
  };
  pauseBtn.addEventListener('click', () => {
    stopLive();
    f.cursor.value = last;
    setStatus(true);
    resumeBtn.focus();
  });
  resume.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const cursor = f.cursor.value.trim();
    const qs = new URLSearchParams({ stream });
    if (cursor) qs.set('after', cursor);
    try {
      await api('GET', `/v1/events?${new URLSearchParams({ stream, after: cursor, limit: '1' })}`);
    } catch (e) {
      clear(status, errorText(e));
      return;
    }
    // Resume shows only what follows the cursor.
    tbody.replaceChildren();
    n = 0;
    list.dataset.count = '0';
    last = cursor;
    following = cursor === '' ? 'start' : cursor === 'end' ? 'end' : 'cursor';
    if (cursor === '') qs.set('after', '');
    history.replaceState(null, '', `#/events?${qs}`);
    setStatus(false);
    live(main, stream, onEvent, cursor);
  });
  clear(main,
    h('h1', {}, 'Events'),
    pick,
    problem ? h('p', { class: 'error', role: 'alert', id: 'events-error' }, problem) : [resume, status, h('div', { class: 'scroll' }, list)]);
  if (problem) return;
  setStatus(false);
  // Without a cursor the stream starts where the log ended when the page
  // was opened (the router's view._end).
  live(main, stream, onEvent, fromStart ? '' : after || undefined);
}
