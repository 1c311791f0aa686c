// Tasks: the filtered list, and one task: did it run, how far did it get,
// why did it stop. State, progress, payload, attributes, the event
// timeline, every execution and its log; cancel (operator).
import { api, h, clear, can, flash, errorText, fmtTime, fmtDuration, badge, table, field, live, debounce,
  shortId, copyButton, jsonBlock, panel, stateTabs, countsURL, sortSelect, atLeast } from './lib.js';
import { taskActionsSection } from './taskactions.js';

const states = ['scheduled', 'pending', 'buffered', 'running', 'succeeded', 'dead', 'canceled'];

// tabCounts: the state tabs' numbers from GET /v1/counts, a lower bound
// marked "n+" (the total is one when any state's count is).
const tabCounts = (c) => {
  const cut = c.tasks_capped || [];
  const out = { '': atLeast(c.tasks_total, cut.length > 0) };
  for (const [s, n] of Object.entries(c.tasks)) out[s] = atLeast(n, cut.includes(s));
  return out;
};

export async function tasksPage(main, q) {
  // The reads go out first; the forms are built while they are answered.
  const aq = new URLSearchParams();
  for (const k of ['queue', 'kind', 'state', 'attr', 'error_contains', 'where', 'idempotency_key', 'created_since', 'created_until', 'order', 'after']) if (q.get(k)) aq.set(k, q.get(k));
  aq.set('limit', '50');
  const listing = api('GET', `/v1/tasks?${aq}`);
  listing.catch(() => {}); // awaited below
  // The tabs' counts arrive when they arrive: the list does not wait.
  const counts = api('GET', countsURL(q.get('queue')));
  counts.catch(() => {});
  const f = {
    id: h('input', { id: 'f-id', name: 'id', placeholder: 'find by id' }),
    queue: h('input', { id: 'f-queue', name: 'queue', value: q.get('queue') || '' }),
    kind: h('input', { id: 'f-kind', name: 'kind', value: q.get('kind') || '' }),
    state: h('select', { id: 'f-state', name: 'state' },
      ['', ...states].map((s) => h('option', { value: s, selected: (q.get('state') || '') === s }, s || 'any'))),
    attr: h('input', { id: 'f-attr', name: 'attr', placeholder: 'key=value', value: q.get('attr') || '' }),
    error_contains: h('input', { id: 'f-error', name: 'error_contains', value: q.get('error_contains') || '' }),
    // Times in the address are RFC 3339 (the API's); the inputs show them
    // in local time.
    created_since: h('input', { id: 'f-since', name: 'created_since', type: 'datetime-local', step: '1', value: toLocalInput(q.get('created_since')) }),
    created_until: h('input', { id: 'f-until', name: 'created_until', type: 'datetime-local', step: '1', value: toLocalInput(q.get('created_until')) }),
    key: h('input', { id: 'f-key', name: 'idempotency_key', placeholder: 'idempotency key' }),
    run: h('input', { id: 'f-run', name: 'run_id', placeholder: 'run id' }),
    where: h('input', { id: 'f-where', name: 'where', placeholder: 'payload.customer.id == 42', size: 36, spellcheck: 'false',
      value: q.get('where') || '' }),
  };
  // A filter the server refuses (a typo in the where box) is said beside
  // the box; the form keeps what was typed.
  const whereErr = h('p', { class: 'error', role: 'alert', id: 'where-error' });
  const form = h('form', { class: 'filters', id: 'task-filters', role: 'search', 'aria-label': 'Filter tasks' },
    field('Queue', f.queue), field('Kind', f.kind), field('State', f.state), field('Attribute', f.attr),
    field('Error contains', f.error_contains), field('Created from', f.created_since), field('Created until', f.created_until),
    h('div', { class: 'where' }, field('Where (a CEL condition on payload and attributes)', f.where), whereErr),
    h('button', { type: 'submit' }, 'Filter'));
  const order = q.get('order') || 'oldest';
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const k of ['queue', 'kind', 'state', 'attr', 'error_contains', 'where']) if (f[k].value) p.set(k, f[k].value);
    for (const k of ['created_since', 'created_until']) if (f[k].value) p.set(k, new Date(f[k].value).toISOString());
    if (order !== 'oldest') p.set('order', order);
    location.hash = `#/tasks?${p}`;
  });
  const find = h('form', { class: 'filters', role: 'search', id: 'task-find', 'aria-label': 'Find a task by id' },
    field('Task id', f.id), h('button', { type: 'submit' }, 'Open'));
  find.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (f.id.value.trim()) location.hash = `#/tasks/${encodeURIComponent(f.id.value.trim())}`;
  });
  // By idempotency key: the list narrowed to it (at most one live task).
  const findKey = h('form', { class: 'filters', role: 'search', id: 'task-find-key', 'aria-label': 'Find a task by idempotency key' },
    field('Idempotency key', f.key), h('button', { type: 'submit' }, 'Find'));
  findKey.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (f.key.value) location.hash = `#/tasks?${new URLSearchParams({ idempotency_key: f.key.value })}`;
  });
  const findRun = h('form', { class: 'filters', role: 'search', id: 'task-find-run', 'aria-label': 'Find a run by its id' },
    field('Run id', f.run), h('button', { type: 'submit' }, 'Open run'));
  findRun.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (f.run.value.trim()) location.hash = `#/runs/${encodeURIComponent(f.run.value.trim())}`;
  });
  let page;
  try {
    page = await listing;
  } catch (e) {
    if (e.status !== 400) throw e;
    clear(whereErr, errorText(e));
    page = { items: [], next_cursor: null, refused: true };
  }
  // An admin can pick rows and act on them, or on all matching
  // (taskactions.js).
  const picking = can('admin') && !page.refused;
  const rows = page.items.map((t) => [
    ...(picking ? [h('input', { type: 'checkbox', class: 'pick', 'aria-label': `Select task ${t.id}`, dataset: { id: t.id } })] : []),
    shortId(t.id, `#/tasks/${encodeURIComponent(t.id)}`),
    t.queue, t.kind, badge(t.state), `${t.attempt}/${t.max_attempts}`, progressText(t.progress),
    fmtTime(t.created_at), h('span', { class: 'err', title: t.last_error || '' }, t.last_error),
  ]);
  const nq = new URLSearchParams(q);
  if (page.next_cursor) nq.set('after', page.next_cursor);
  const first = new URLSearchParams(q);
  first.delete('after');
  // The tabs and the sort keep the other filters; they start again at the
  // first page.
  const withParam = (k, v) => {
    const p = new URLSearchParams(first);
    if (v) p.set(k, v);
    else p.delete(k);
    return `#/tasks?${p}`;
  };
  const tabs = !page.refused ? stateTabs('task-tabs', ['', 'pending', 'scheduled', 'running', 'buffered', 'succeeded', 'canceled', 'dead'],
    q.get('state') || '', (s) => withParam('state', s), tabCounts, q.get('queue'), counts) : null;
  const sort = sortSelect('task-order', order, (v) => { location.hash = withParam('order', v === 'oldest' ? '' : v); });
  const active = ['queue', 'kind', 'attr', 'error_contains', 'created_since', 'created_until', 'where', 'idempotency_key']
    .filter((k) => q.get(k)).map((k) => `${k}=${q.get(k)}`);
  const listDiv = h('div', { class: 'scroll', id: 'task-list' },
    table('Tasks', [...(picking ? [h('input', { type: 'checkbox', id: 'pick-all', 'aria-label': 'Select every task of this page' })] : []),
      'Id', 'Queue', 'Kind', 'State', 'Attempts', 'Progress', 'Created', 'Last error'], rows,
    page.refused ? 'The filter was refused: see beside the where box.' : 'No task matches.', 'list'));
  clear(main,
    h('h1', {}, 'Tasks'),
    h('div', { class: 'toolbar' }, tabs, h('label', { class: 'sort' }, 'Sort ', sort)),
    panel('task-filters-panel', ['Filters', active.length ? h('span', { class: 'muted small', id: 'task-active' }, ` · ${active.join(' · ')}`) : null],
      [h('div', { class: 'finders' }, find, findKey, findRun), form], { open: !!page.refused }),
    picking ? panel('task-actions-panel', 'Act on tasks: cancel, run now, delete, change priority',
      taskActionsSection(listDiv, q, () => { if (main.isConnected && location.hash.startsWith('#/tasks')) tasksPage(main, q).catch(() => {}); })) : null,
    q.get('idempotency_key') ? h('p', { class: 'muted', id: 'key-filter' }, 'Tasks enqueued with the idempotency key ', h('code', {}, q.get('idempotency_key'))) : null,
    listDiv,
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      q.get('after') ? h('a', { href: `#/tasks?${first}` }, 'First page') : null,
      page.next_cursor ? h('a', { href: `#/tasks?${nq}`, rel: 'next' }, 'Next page') : null));
}

// toLocalInput: an RFC 3339 time as a datetime-local input's value.
function toLocalInput(s) {
  if (!s) return '';
  const d = new Date(s);
  if (isNaN(d)) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function progressText(p) {
  if (!p || !p.total_steps) return '';
  return `${p.completed_steps || 0}/${p.total_steps}`;
}

export function attributesList(attrs) {
  const keys = Object.keys(attrs || {}).sort();
  if (keys.length === 0) return h('p', { class: 'muted' }, 'None.');
  return h('dl', { class: 'facts', id: 'attributes' }, keys.map((k) => [h('dt', {}, k), h('dd', {}, attrs[k])]));
}

export function timelineSection(events) {
  const items = (events || []).map((e) => h('li', {},
    h('time', { datetime: e.time }, fmtTime(e.time)), ' ',
    h('strong', {}, e.type), e.actor ? ` by ${e.actor}` : '',
    e.body && Object.keys(e.body).length ? h('code', { class: 'body' }, JSON.stringify(e.body)) : null));
  return h('section', { 'aria-labelledby': 'timeline-title' },
    h('h2', { id: 'timeline-title' }, 'Timeline'),
    items.length ? h('ol', { class: 'timeline', id: 'timeline' }, items) : h('p', { class: 'muted' }, 'No events.'));
}

// EXECUTIONS_WINDOW is how many executions a task page asks for at a time
// (the API answers the newest first window, oldest first, and a cursor for
// the older ones): a task replayed a thousand times stays a page long.
export const EXECUTIONS_WINDOW = 25;

// executionsSection shows the window of executions the page fetched from
// path (the task's or the dead letter's GET) and, while older ones are left
// out, a button that fetches the next older window and puts it on top.
export function executionsSection(t, path) {
  const row = (x) => h('tr', {}, [
    String(x.attempt), x.outcome ? badge(x.outcome, `outcome ${x.outcome}`) : badge('running'),
    fmtTime(x.started_at), fmtDuration(x.started_at, x.finished_at),
    x.worker_id ? h('a', { href: `#/workers/${encodeURIComponent(x.worker_id)}`, class: 'mono' }, x.worker_id) : '',
    h('span', { class: 'err' }, x.error, x.error_detail ? h('details', {}, h('summary', {}, 'detail'), h('pre', {}, x.error_detail)) : null),
    h('a', { href: `#/tasks/${encodeURIComponent(t.id)}?log=${encodeURIComponent(x.execution_id)}`,
      'aria-label': `Log of attempt ${x.attempt}` }, 'log'),
  ].map((c) => h('td', {}, c)));
  const ex = t.executions || [];
  const total = t.executions_total ?? ex.length;
  let shown = ex.length;
  let next = t.executions_next || null;
  const note = h('p', { class: 'muted small', id: 'executions-count', 'aria-live': 'polite' });
  const tbody = h('tbody', {}, ex.map(row));
  const older = h('button', { type: 'button', id: 'executions-older', class: 'small' });
  const say = () => {
    note.textContent = shown < total ? `The newest ${shown} of ${total} executions.` : `${total} executions.`;
    older.textContent = `Show ${Math.min(EXECUTIONS_WINDOW, total - shown)} older`;
    older.hidden = !next;
  };
  older.addEventListener('click', async () => {
    older.disabled = true;
    try {
      const qs = new URLSearchParams({ executions_limit: String(EXECUTIONS_WINDOW), executions_before: next });
      const page = await api('GET', `${path}?${qs}`);
      tbody.prepend(...(page.executions || []).map(row));
      shown += (page.executions || []).length;
      next = page.executions_next || null;
      say();
    } catch (e) {
      flash(errorText(e), 'error');
    } finally {
      older.disabled = false;
    }
  });
  say();
  const body = ex.length === 0 ? h('p', { class: 'muted' }, 'It has not run yet.')
    : h('table', {},
      h('caption', { class: 'sr-only' }, 'Executions of this task'),
      h('thead', {}, h('tr', {}, ['Attempt', 'Outcome', 'Started', 'Duration', 'Worker', 'Error', 'Log'].map((x) => h('th', { scope: 'col' }, x)))),
      tbody);
  return h('section', { 'aria-labelledby': 'exec-title' },
    h('h2', { id: 'exec-title' }, 'Executions'),
    ex.length ? note : null,
    h('div', { class: 'scroll', id: 'executions' }, body),
    ex.length ? h('p', {}, older) : null);
}

// debounceFacts: a debounced task's key, the quiet period it waits for
// (its run time moves on with each enqueue of the key) and when it runs at
// the latest (its first enqueue plus the max wait), docs/keys.md.
function debounceFacts(d) {
  return ['key ', h('span', { class: 'mono', id: 'task-debounce-key' }, d.key),
    ' · runs once the key is quiet for ', h('span', { id: 'task-debounce-for' }, d.for),
    ' · at the latest ', d.max_wait_until
      ? h('time', { id: 'task-debounce-until', datetime: d.max_wait_until }, fmtTime(d.max_wait_until))
      : h('span', { id: 'task-debounce-until' }, 'no max wait')];
}

export async function taskPage(main, id) {
  const path = `/v1/tasks/${encodeURIComponent(id)}`;
  const t = await api('GET', `${path}?executions_limit=${EXECUTIONS_WINDOW}`);
  const logBox = h('section', { id: 'log', 'aria-labelledby': 'log-title', hidden: true });
  const logURL = (x, after) => {
    const qs = new URLSearchParams({ limit: '200' });
    if (after !== undefined && after !== null) qs.set('after', String(after));
    return `/v1/tasks/${encodeURIComponent(t.id)}/executions/${encodeURIComponent(x.execution_id)}/logs?${qs}`;
  };
  // Each line says its stream (stdout, stderr, log, output); stderr's
  // lines stand out.
  const logLine = (l) => h('span', { class: `line ${l.stream}`, dataset: { stream: l.stream } }, `${fmtTime(l.at)} ${l.stream} ${l.line}\n`);
  // follow appends the lines a running attempt writes, one read a second
  // after the last line shown, while the log is on screen.
  const follow = (x, pre, last) => {
    const tick = async () => {
      if (!pre.isConnected) return;
      try {
        const page = await api('GET', logURL(x, last));
        for (const l of page.items) {
          pre.append(logLine(l));
          last = l.seq;
        }
      } catch { /* the next tick tries again */ }
      if (pre.isConnected) setTimeout(tick, 1000);
    };
    setTimeout(tick, 1000);
  };
  const showLog = async (x, after) => {
    logBox.hidden = false;
    const running = !x.finished_at;
    try {
      const page = await api('GET', logURL(x, after));
      const more = page.next_cursor ? h('button', { type: 'button', onclick: () => showLog(x, page.next_cursor) }, 'Next lines') : null;
      const pre = h('pre', { class: 'log', id: 'log-lines', tabindex: '0', 'aria-live': running ? 'polite' : 'off' }, page.items.map(logLine));
      const download = h('a', { id: 'log-download', download: `${t.id}-attempt-${x.attempt}.log`,
        href: `/v1/tasks/${encodeURIComponent(t.id)}/executions/${encodeURIComponent(x.execution_id)}/logs?format=text` }, 'Download the whole log (text)');
      clear(logBox,
        h('h2', { id: 'log-title' }, `Log of attempt ${x.attempt}`),
        h('p', { class: 'small' }, download),
        page.items.length || running ? pre : h('p', { class: 'muted' }, 'No lines.'),
        more,
        running ? h('p', { class: 'muted small', id: 'log-following' }, 'Following the running attempt: new lines appear as it writes them.') : null);
      if (running && !page.next_cursor) follow(x, pre, page.items.length ? page.items[page.items.length - 1].seq : after);
    } catch (e) {
      clear(logBox, h('h2', { id: 'log-title' }, 'Log'), h('p', { class: 'error' }, errorText(e)));
    }
  };
  const pct = t.progress && t.progress.total_steps ? Math.min(100, Math.round(100 * (t.progress.completed_steps || 0) / t.progress.total_steps)) : null;
  const waiting = ['scheduled', 'pending', 'buffered', 'running'].includes(t.state);
  const cancel = can('operator') && waiting && !t.cancel_requested_at
    ? h('button', { type: 'button', class: 'danger', id: 'cancel', onclick: async () => {
      try {
        await api('POST', `/v1/tasks/${encodeURIComponent(t.id)}/cancel`);
        flash(`Cancel requested for ${t.id}.`);
        await taskPage(main, id);
      } catch (e) {
        flash(errorText(e), 'error');
      }
    } }, 'Cancel task')
    : null;
  clear(main,
    h('p', {}, h('a', { href: '#/tasks' }, '← Tasks')),
    h('h1', {}, 'Task ', h('span', { class: 'mono' }, t.id), ' ', copyButton(t.id, 'Copy the task id')),
    h('dl', { class: 'facts' },
      h('dt', {}, 'State'), h('dd', { id: 'task-state' }, badge(t.state), t.cancel_requested_at ? ' (cancel requested)' : ''),
      t.waiting ? [h('dt', {}, 'Waiting'), h('dd', { id: 'task-waiting' }, t.waiting, ' · ', h('a', { href: '#/limits' }, 'limits'))] : null,
      h('dt', {}, 'Queue'), h('dd', {}, h('a', { href: `#/tasks?queue=${encodeURIComponent(t.queue)}` }, t.queue)),
      h('dt', {}, 'Kind'), h('dd', { id: 'task-kind' }, t.kind),
      h('dt', {}, 'Attempts'), h('dd', {}, `${t.attempt} of ${t.max_attempts}`),
      h('dt', {}, 'Progress'), h('dd', {}, pct === null ? '—'
        : [h('progress', { max: 100, value: pct, 'aria-label': 'Progress' }), ` ${progressText(t.progress)} steps (${pct}%)`]),
      h('dt', {}, 'Created'), h('dd', {}, fmtTime(t.created_at)),
      h('dt', {}, 'Run at'), h('dd', {}, fmtTime(t.run_at)),
      t.debounce ? [h('dt', {}, 'Debounce'), h('dd', { id: 'task-debounce' }, debounceFacts(t.debounce))] : null,
      t.state === 'running' && t.execution_id ? [h('dt', {}, 'Running'), h('dd', {}, `attempt ${t.attempt} on `,
        t.worker_id ? h('a', { href: `#/workers/${encodeURIComponent(t.worker_id)}`, class: 'mono', id: 'current-worker' }, t.worker_id) : '?', ' · ',
        h('a', { href: `#/tasks/${encodeURIComponent(t.id)}?log=${encodeURIComponent(t.execution_id)}`, id: 'current-log' }, 'follow its log'))] : null,
      h('dt', {}, 'Last error'), h('dd', { class: 'err', id: 'last-error' }, t.last_error || '—'),
      t.state === 'dead' ? [h('dt', {}, 'Dead letter'), h('dd', {}, h('a', { href: `#/dlq/${encodeURIComponent(t.id)}` }, `${t.reason} · ${t.dlq_status}`))] : null),
    cancel ? h('p', {}, cancel) : null,
    payloadSection(t),
    h('section', { 'aria-labelledby': 'attrs-title' }, h('h2', { id: 'attrs-title' }, 'Attributes'), attributesList(t.attributes)),
    executionsSection(t, path),
    logBox,
    timelineSection(t.events));
  const want = new URLSearchParams(location.hash.split('?')[1] || '').get('log');
  let x = (t.executions || []).find((e) => e.execution_id === want);
  if (!x && want && want === t.execution_id) x = { execution_id: t.execution_id, attempt: t.attempt, finished_at: null };
  if (x) await showLog(x);
  const known = new Set((t.events || []).map((e) => e.id));
  const refresh = debounce(() => { if (location.hash.startsWith(`#/tasks/${encodeURIComponent(id)}`)) taskPage(main, id).catch(() => {}); }, 1000);
  live(main, `task.${id}`, (e) => { if (!known.has(e.id)) refresh(); });
}

// payloadSection shows the payload masked, as every role reads it; an admin
// may ask for it raw, which the API records in the task's history
// (task.payload_viewed, with the admin's token name).
export function payloadSection(t) {
  const note = h('span', { class: 'muted small', id: 'payload-mode' }, '(secrets masked)');
  const block = jsonBlock(t.payload, { id: 'payload', title: 'Payload' });
  const pre = block.querySelector('pre');
  const raw = can('admin') ? h('button', { type: 'button', class: 'small', id: 'show-raw', onclick: async () => {
    try {
      const full = await api('GET', `/v1/tasks/${encodeURIComponent(t.id)}?raw=true`);
      clear(pre, JSON.stringify(full.payload, null, 2));
      clear(note, '(raw: this view is recorded in the task\'s history)');
      block.open = true;
      raw.remove();
    } catch (e) {
      flash(errorText(e), 'error');
    }
  } }, 'Show raw (audited)') : null;
  // A workflow fan-out item stores a reference to its run's input
  // (input_of_run); its handler receives the input in its place.
  const run = t.payload && typeof t.payload === 'object' && t.payload.input_of_run;
  const ref = typeof run === 'string' && run === (t.attributes || {}).run_id
    ? h('p', { class: 'muted small', id: 'payload-input' }, 'A fan-out item: its handler receives the run\'s input in place of input_of_run (',
      h('a', { href: `#/runs/${encodeURIComponent(run)}` }, 'the run'), ').')
    : null;
  return h('section', { 'aria-labelledby': 'payload-title' },
    h('h2', { id: 'payload-title' }, 'Payload ', note, ' ', raw), ref, block);
}
