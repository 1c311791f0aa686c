// Audit: the operators' actions (GET /v1/audit: the event log's audit
// stream, docs/events.md) filtered by actor, action type, target and time
// range, newest first, live on the audit stream. The filters live in the
// address (#/audit?actor=…&type=…), so a filtered audit is a link.
import { api, h, clear, fmtTime, field, errorText, live, debounce } from './lib.js';

// types: the audited actions offered in the type box (the server refuses
// any other and names the valid ones).
const types = ['queue.paused', 'queue.resumed', 'token.created', 'token.revoked', 'workflow.applied',
  'run.canceled', 'run.resumed', 'step.force_completed', 'task.canceled', 'task.cancel_requested', 'task.payload_viewed',
  'task.run_now', 'task.deleted', 'task.reprioritized',
  'dlq.replay_requested', 'dlq.discarded', 'dlq.resolved', 'dlq.purged', 'lease_key.rotated', 'limit.set', 'limit.removed', 'queue.fair_set', 'queue.fair_removed',
  'schedule.saved', 'schedule.paused', 'schedule.resumed', 'schedule.removed'];
const filters = ['actor', 'type', 'target', 'since', 'until'];
// maxShown: the newest actions kept on screen.
const maxShown = 500;

function targetLink(e) {
  if (!e.target) return '';
  const fam = e.type.split('.')[0];
  if (fam === 'task' || fam === 'dlq') return h('a', { href: `#/tasks/${encodeURIComponent(e.target)}`, class: 'mono' }, e.target);
  // A forced step's target is its task; the run page shows it.
  if (fam === 'step' && e.body && e.body.run_id) return h('a', { href: `#/runs/${encodeURIComponent(e.body.run_id)}`, class: 'mono' }, e.target);
  if (fam === 'run') return h('a', { href: `#/runs/${encodeURIComponent(e.target)}`, class: 'mono' }, e.target);
  return h('span', { class: 'mono' }, e.target);
}

// details: the body's fields other than target and reason.
function details(e) {
  const b = { ...(e.body || {}) };
  delete b.target;
  delete b.reason;
  return Object.keys(b).length ? h('code', { class: 'body' }, JSON.stringify(b)) : '';
}

export async function auditPage(main, q) {
  const f = {
    actor: h('input', { id: 'au-actor', name: 'actor', value: q.get('actor') || '', spellcheck: 'false', autocomplete: 'off' }),
    type: h('input', { id: 'au-type', name: 'type', value: q.get('type') || '', list: 'au-types', spellcheck: 'false', autocomplete: 'off',
      placeholder: 'e.g. queue.paused' }),
    target: h('input', { id: 'au-target', name: 'target', value: q.get('target') || '', spellcheck: 'false', autocomplete: 'off' }),
    since: h('input', { id: 'au-since', name: 'since', value: q.get('since') || '', placeholder: '24h, 7d or a time', spellcheck: 'false' }),
    until: h('input', { id: 'au-until', name: 'until', value: q.get('until') || '', placeholder: 'empty: now', spellcheck: 'false' }),
  };
  const form = h('form', { class: 'filters', id: 'audit-filters', role: 'search', 'aria-label': 'Filter the audit' },
    field('Actor', f.actor), field('Action type', f.type), h('datalist', { id: 'au-types' }, types.map((t) => h('option', { value: t }))),
    field('Target', f.target), field('Since', f.since), field('Until', f.until),
    h('button', { type: 'submit', class: 'primary' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const k of filters) if (f[k].value.trim()) p.set(k, f[k].value.trim());
    location.hash = `#/audit?${p}`;
  });
  const error = h('p', { class: 'error', role: 'alert', id: 'audit-error' });
  const status = h('p', { class: 'muted small', id: 'audit-status', role: 'status', 'aria-live': 'polite' });
  const tbody = h('tbody', { id: 'audit-rows' });
  const list = h('table', { id: 'audit-list', 'data-count': '0' },
    h('caption', { class: 'sr-only' }, 'Operator actions, newest first'),
    h('thead', {}, h('tr', {}, ['Time', 'Action', 'Actor', 'Target', 'Reason', 'Details'].map((x) => h('th', { scope: 'col' }, x)))),
    tbody);
  const more = h('button', { type: 'button', id: 'audit-more', hidden: true }, 'Read further');
  const base = new URLSearchParams();
  for (const k of filters) if (q.get(k)) base.set(k, q.get(k));
  let cursor = '';
  let n = 0;
  const add = (items) => {
    for (const e of items) {
      tbody.prepend(h('tr', { dataset: { cursor: e.cursor, type: e.type } },
        h('td', {}, h('time', { datetime: e.time }, fmtTime(e.time))),
        h('td', {}, h('strong', {}, e.type)),
        h('td', {}, e.actor),
        h('td', {}, targetLink(e)),
        h('td', {}, e.reason || ''),
        h('td', {}, details(e))));
      n++;
    }
    while (tbody.children.length > maxShown) tbody.lastElementChild.remove();
    list.dataset.count = String(n);
  };
  // read reads on behind the cursor: until the end of the log, or (a long
  // log) one slice a click.
  let reading = false;
  const read = async () => {
    if (reading) return;
    reading = true;
    try {
      for (;;) {
        const p = new URLSearchParams(base);
        p.set('limit', '1000');
        if (cursor) p.set('after', cursor);
        const page = await api('GET', `/v1/audit?${p}`);
        add(page.items);
        cursor = page.next_cursor;
        clear(error);
        if (page.complete) {
          more.hidden = true;
          clear(status, `${n} action${n === 1 ? '' : 's'}${n > maxShown ? ` (the newest ${maxShown} shown)` : ''}; live.`);
          return;
        }
        if (page.items.length === 0) {
          more.hidden = false;
          clear(status, `${n} so far; the log goes on.`);
          return;
        }
      }
    } catch (e) {
      clear(error, errorText(e));
    } finally {
      reading = false;
    }
  };
  more.addEventListener('click', read);
  clear(main, h('h1', {}, 'Audit'),
    h('p', { class: 'muted' }, 'Who did what, when, to what and why: queue pauses, tokens, workflow applies, run and task cancels, ',
      'dead-letter replays, discards and resolves, payload views, lease-key rotations.'),
    form, error, status, h('div', { class: 'scroll' }, list), more);
  await read();
  if (!error.textContent) live(main, 'audit', debounce(() => { read(); }, 250));
}
