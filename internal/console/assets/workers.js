// Workers: the registry (host, pid, queues, version, labels, state, last
// seen), and one worker with what it runs now and its executions (paged,
// newest first, filtered by outcome), each linking to the attempt's log on
// the task page (seed 004's path: task → instances → executions → logs).
import { api, h, clear, fmtTime, fmtAge, fmtDuration, badge, table, field, live, debounce, fmtClockSeconds } from './lib.js';

const workerStates = ['active', 'stale', 'stopping', 'stopped'];
const outcomes = ['succeeded', 'transient_error', 'permanent_error', 'timeout', 'canceled', 'lease_expired', 'snoozed', 'released'];
const executionsPage = 50;

// kindText: how the worker runs, from the registry: remote workers talk
// HTTP to the server; the CLI labels its workers runner=exec (`backstop
// work`: a program per task) or runner=serve (in-process in `backstop
// serve`); any other is a Go program's library worker on the database.
export function kindText(w) {
  const runner = (w.labels || {}).runner;
  if (runner === 'exec') return w.remote ? 'exec (backstop work --server)' : 'exec (backstop work)';
  if (runner === 'serve' && !w.remote) return 'in-process (backstop serve)';
  return w.remote ? 'remote (HTTP)' : 'library (Go, database)';
}

function labelsText(labels) {
  const keys = Object.keys(labels || {}).sort();
  return keys.map((k) => `${k}=${labels[k]}`).join(', ');
}

export async function workersPage(main, q) {
  const f = {
    queue: h('input', { id: 'wf-queue', name: 'queue', value: q.get('queue') || '' }),
    state: h('select', { id: 'wf-state', name: 'state' },
      ['', ...workerStates].map((s) => h('option', { value: s, selected: (q.get('state') || '') === s }, s || 'any'))),
    label: h('input', { id: 'wf-label', name: 'label', placeholder: 'key=value', value: q.get('label') || '' }),
  };
  const form = h('form', { class: 'filters', id: 'worker-filters', role: 'search', 'aria-label': 'Filter workers' },
    field('Queue', f.queue), field('State', f.state), field('Label', f.label), h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const k of ['queue', 'state', 'label']) if (f[k].value) p.set(k, f[k].value);
    location.hash = `#/workers?${p}`;
  });
  const render = async () => {
    const aq = new URLSearchParams();
    for (const k of ['queue', 'state', 'label', 'after']) if (q.get(k)) aq.set(k, q.get(k));
    aq.set('limit', '50');
    const page = await api('GET', `/v1/workers?${aq}`);
    const now = Date.now();
    const rows = page.items.map((w) => [
      h('a', { href: `#/workers/${encodeURIComponent(w.id)}`, class: 'mono' }, w.id),
      w.host, String(w.pid || ''), (w.queues || []).join(', '), w.version || '—', labelsText(w.labels),
      kindText(w), badge(w.state), String((w.current_execution_ids || []).length),
      h('time', { datetime: w.last_seen, title: fmtTime(w.last_seen) }, `${fmtAge(now - new Date(w.last_seen))} ago`),
    ]);
    const nq = new URLSearchParams(q);
    if (page.next_cursor) nq.set('after', page.next_cursor);
    const first = new URLSearchParams(q);
    first.delete('after');
    clear(main,
      h('h1', {}, 'Workers'),
      form,
      h('div', { class: 'scroll', id: 'worker-list' },
        table('Registered workers', ['Id', 'Host', 'PID', 'Queues', 'Version', 'Labels', 'Kind', 'State', 'Running', 'Last seen'], rows,
          'No worker is registered.')),
      h('nav', { class: 'pager', 'aria-label': 'Pages' },
        q.get('after') ? h('a', { href: `#/workers?${first}` }, 'First page') : null,
        page.next_cursor ? h('a', { href: `#/workers?${nq}`, rel: 'next' }, 'Next page') : null),
      h('p', { class: 'muted small' }, 'Updated ', fmtClockSeconds(),
        ' · live: the list refreshes on worker events'));
  };
  await render();
  const refresh = debounce(() => { if (location.hash.startsWith('#/workers') && !location.hash.startsWith('#/workers/')) render().catch(() => {}); }, 1000);
  live(main, 'all', (e) => { if (e.type && e.type.startsWith('worker.')) refresh(); });
}

export async function workerPage(main, id, q = new URLSearchParams()) {
  const base = `#/workers/${encodeURIComponent(id)}`;
  const outcome = h('select', { id: 'wexec-outcome', name: 'outcome' },
    ['', ...outcomes].map((o) => h('option', { value: o, selected: (q.get('outcome') || '') === o }, o || 'any')));
  const form = h('form', { class: 'filters', id: 'wexec-filters', role: 'search', 'aria-label': 'Filter executions' },
    field('Outcome', outcome), h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (q.get('limit')) p.set('limit', q.get('limit'));
    if (outcome.value) p.set('outcome', outcome.value);
    location.hash = p.toString() ? `${base}?${p}` : base;
  });
  const render = async () => {
    const eq = new URLSearchParams();
    for (const k of ['outcome', 'after']) if (q.get(k)) eq.set(k, q.get(k));
    eq.set('limit', q.get('limit') || String(executionsPage)); // ?limit= in the address: another page size
    const [w, page] = await Promise.all([
      api('GET', `/v1/workers/${encodeURIComponent(id)}`),
      api('GET', `/v1/workers/${encodeURIComponent(id)}/executions?${eq}`),
    ]);
    const rows = (page.items || []).map((x) => [
      h('a', { href: `#/tasks/${encodeURIComponent(x.task_id)}`, class: 'mono' }, x.task_id),
      String(x.attempt), x.outcome ? badge(x.outcome, `outcome ${x.outcome}`) : badge('running'),
      fmtTime(x.started_at), fmtDuration(x.started_at, x.finished_at),
      h('span', { class: 'err' }, x.error),
      h('a', { href: `#/tasks/${encodeURIComponent(x.task_id)}?log=${encodeURIComponent(x.execution_id)}`,
        class: 'exec-log', 'aria-label': `Log of ${x.task_id} attempt ${x.attempt}` }, 'log'),
    ]);
    const running = w.current_execution_ids || [];
    const nq = new URLSearchParams(q);
    if (page.next_cursor) nq.set('after', page.next_cursor);
    const first = new URLSearchParams(q);
    first.delete('after');
    clear(main,
      h('p', {}, h('a', { href: '#/workers' }, '← Workers')),
      h('h1', {}, 'Worker ', h('span', { class: 'mono' }, w.id)),
      h('dl', { class: 'facts', id: 'worker-facts' },
        h('dt', {}, 'State'), h('dd', { id: 'worker-state' }, badge(w.state)),
        h('dt', {}, 'Host'), h('dd', { id: 'worker-host' }, w.host),
        h('dt', {}, 'PID'), h('dd', {}, String(w.pid || '')),
        h('dt', {}, 'Queues'), h('dd', {}, (w.queues || []).join(', ')),
        h('dt', {}, 'Version'), h('dd', { id: 'worker-version' }, w.version || '—'),
        h('dt', {}, 'Labels'), h('dd', { id: 'worker-labels' }, labelsText(w.labels) || '—'),
        h('dt', {}, 'Kind'), h('dd', { id: 'worker-kind' }, kindText(w)),
        h('dt', {}, 'Running now'), h('dd', { id: 'worker-running', class: 'mono' }, running.length ? running.join(', ') : '—'),
        h('dt', {}, 'Started'), h('dd', {}, fmtTime(w.started_at)),
        h('dt', {}, 'Last seen'), h('dd', {}, fmtTime(w.last_seen)),
        w.stopped_at ? [h('dt', {}, 'Stopped'), h('dd', {}, fmtTime(w.stopped_at))] : null),
      // A worker's own stream is short: its events from the start.
      h('p', {}, h('a', { href: `#/events?${new URLSearchParams({ stream: `worker.${w.id}`, after: '' })}` }, 'Follow this worker\'s events')),
      h('section', { 'aria-labelledby': 'wexec-title' },
        h('h2', { id: 'wexec-title' }, 'Executions'),
        form,
        h('div', { class: 'scroll', id: 'worker-executions' },
          table('Executions of this worker, newest first', ['Task', 'Attempt', 'Outcome', 'Started', 'Duration', 'Error', 'Log'],
            rows, q.get('outcome') ? 'No execution with this outcome.' : 'No execution yet.')),
        h('nav', { class: 'pager', id: 'wexec-pager', 'aria-label': 'Pages of executions' },
          q.get('after') ? h('a', { href: first.toString() ? `${base}?${first}` : base, id: 'wexec-first' }, 'Newest') : null,
          page.next_cursor ? h('a', { href: `${base}?${nq}`, rel: 'next', id: 'wexec-next' }, 'Older') : null)));
  };
  await render();
  const here = () => location.hash === base || location.hash.startsWith(`${base}?`);
  // Live updates refresh the first page only: an older page stays put.
  const refresh = debounce(() => { if (here() && !q.get('after')) render().catch(() => {}); }, 1000);
  live(main, `worker.${id}`, refresh);
}
