// Redrives: every bulk replay is a durable job of its own (GET
// /v1/redrives). The list, newest first; one redrive: its filter and patch
// (masked), its counts by outcome, and its items that did not replay and
// why (GET /v1/redrives/{id}/items?failed=true), or any one outcome's;
// cancel a running one, resume one that stopped or whose runner is gone
// (admin; refused while its runner is alive). A running redrive's page
// polls its record until it ends and its runner is gone.
import { api, h, clear, can, errorText, fmtTime, badge, table, field, pretty } from './lib.js';

const outcomes = ['failed', 'replayed', 'conflict', 'unprocessable', 'not_open', ''];
const resumable = ['canceled', 'interrupted', 'stopped', 'over_budget'];

export async function redrivesPage(main, q) {
  const aq = new URLSearchParams({ limit: '50' });
  if (q.get('before')) aq.set('before', q.get('before'));
  const page = await api('GET', `/v1/redrives?${aq}`);
  const rows = page.items.map((r) => [
    h('a', { href: `#/redrives/${encodeURIComponent(r.id)}`, class: 'mono' }, r.id),
    badge(r.status, r.status), String(r.replayed), String(r.failed), fmtTime(r.started_at), fmtTime(r.finished_at),
    h('code', { class: 'small' }, filterText(r.filter)),
  ]);
  const nq = new URLSearchParams(q);
  if (page.next) nq.set('before', page.next);
  clear(main,
    h('h1', {}, 'Redrives'),
    h('p', { class: 'muted' }, 'Each bulk replay of dead letters, with what became of every item.'),
    h('div', { class: 'scroll', id: 'redrive-list' },
      table('Redrives', ['Id', 'Status', 'Replayed', 'Failed', 'Started', 'Finished', 'Filter'], rows, 'No redrive yet.')),
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      q.get('before') ? h('a', { href: '#/redrives' }, 'First page') : null,
      page.next ? h('a', { href: `#/redrives?${nq}`, rel: 'next' }, 'Next page') : null));
}

export async function redrivePage(main, id, q) {
  const eid = encodeURIComponent(id);
  const outcome = q.get('outcome') ?? 'failed';
  const iq = new URLSearchParams({ limit: '100' });
  if (outcome === 'failed') iq.set('failed', 'true');
  else if (outcome) iq.set('outcome', outcome);
  if (q.get('after')) iq.set('after', q.get('after'));
  const [st, items] = await Promise.all([api('GET', `/v1/redrives/${eid}`), api('GET', `/v1/redrives/${eid}/items?${iq}`)]);
  const facts = h('dl', { class: 'facts', id: 'redrive-facts' });
  const counts = h('div', { id: 'redrive-outcomes' });
  const err = h('p', { class: 'error', role: 'alert', id: 'redrive-error' });
  const cancel = h('button', { type: 'button', id: 'redrive-cancel', hidden: true }, 'Cancel');
  const resume = h('button', { type: 'button', class: 'primary', id: 'redrive-resume', hidden: true }, 'Resume');
  const sec = h('section', { id: 'redrive', 'aria-label': 'Redrive' }, facts, counts,
    can('admin') ? h('div', { class: 'actions' }, cancel, resume) : null, err);
  const show = (s) => {
    sec.dataset.status = s.status;
    const f = s.filter || {};
    clear(facts,
      h('dt', {}, 'Status'), h('dd', { id: 'redrive-status' }, badge(s.status, s.status), s.error ? h('span', { class: 'err' }, ` ${s.error}`) : null),
      h('dt', {}, 'Started'), h('dd', {}, fmtTime(s.started_at)),
      h('dt', {}, 'Finished'), h('dd', {}, fmtTime(s.finished_at) || '—'),
      h('dt', {}, 'Dead letters as of'), h('dd', {}, fmtTime(s.snapshot)),
      h('dt', {}, 'Runner'), h('dd', { id: 'redrive-runner' }, runnerText(s)),
      h('dt', {}, 'Replayed'), h('dd', { id: 'redrive-replayed' }, String(s.replayed)),
      h('dt', {}, 'Did not replay'), h('dd', { id: 'redrive-failed' }, String(s.failed)),
      s.why || f.operator_reason ? [h('dt', {}, 'Why'), h('dd', { id: 'redrive-why' }, s.why || f.operator_reason)] : null,
      h('dt', {}, 'Filter and patch'), h('dd', {}, h('pre', { class: 'json', id: 'redrive-filter' }, pretty(f))),
      s.cursor ? [h('dt', {}, 'Cursor'), h('dd', { class: 'mono' }, s.cursor)] : null);
    const oc = s.outcomes || {};
    const t = table('Items by outcome', ['Outcome', 'Count'],
      Object.keys(oc).sort().map((k) => [h('a', { href: `#/redrives/${eid}?outcome=${k}` }, badge(k, k === 'replayed' ? 'succeeded' : 'outcome')),
        h('span', { dataset: { outcome: k } }, String(oc[k]))]), 'No item yet.');
    const tbl = t.tagName === 'TABLE' ? t : t.querySelector('table');
    if (tbl) tbl.classList.add('groups');
    clear(counts, t);
    cancel.hidden = s.status !== 'running';
    resume.hidden = !(resumable.includes(s.status) || s.resumable);
    // Its runner is alive (it stops after its current batch): resume
    // would be refused until it is gone.
    resume.disabled = !!s.runner_alive;
    sec.dataset.runnerAlive = String(!!s.runner_alive);
  };
  show(st);
  cancel.addEventListener('click', async () => {
    clear(err);
    cancel.disabled = true;
    try {
      show(await api('POST', `/v1/redrives/${eid}/cancel`));
    } catch (e) {
      clear(err, errorText(e));
    }
    cancel.disabled = false;
  });
  resume.addEventListener('click', async () => {
    clear(err);
    resume.disabled = true;
    try {
      await api('POST', `/v1/redrives/${eid}/resume`, {});
      show(await api('GET', `/v1/redrives/${eid}`));
      poll();
    } catch (e) {
      clear(err, errorText(e));
    }
    resume.disabled = false;
  });
  // While it runs, its record is read twice a second; once it ends, the
  // page is read again (its items changed).
  let polling = false;
  const poll = async () => {
    if (polling) return;
    polling = true;
    try {
      // The page is in the document once its render returned: wait first.
      while (sec.dataset.status === 'running' || sec.dataset.runnerAlive === 'true') {
        await new Promise((r) => setTimeout(r, 500));
        if (!sec.isConnected) return;
        try {
          show(await api('GET', `/v1/redrives/${eid}`));
        } catch (e) {
          clear(err, errorText(e));
          return;
        }
      }
      if (sec.isConnected && location.hash.startsWith(`#/redrives/${eid}`)) redrivePage(main, id, q).catch(() => {});
    } finally {
      polling = false;
    }
  };
  const pick = h('select', { id: 'f-outcome', name: 'outcome' },
    outcomes.map((o) => h('option', { value: o, selected: outcome === o }, o === 'failed' ? 'did not replay' : o || 'any')));
  pick.addEventListener('change', () => { location.hash = `#/redrives/${eid}?outcome=${pick.value}`; });
  const rows = items.items.map((it) => [
    h('a', { href: `#/dlq/${encodeURIComponent(it.task_id)}`, class: 'mono' }, it.task_id),
    badge(it.outcome, it.outcome === 'replayed' ? 'succeeded' : 'outcome'), h('span', { class: 'err' }, it.detail || ''), fmtTime(it.at),
  ]);
  const nq = new URLSearchParams(q);
  if (items.next) nq.set('after', items.next);
  const first = new URLSearchParams(q);
  first.delete('after');
  clear(main,
    h('p', {}, h('a', { href: '#/redrives' }, '← Redrives')),
    h('h1', {}, 'Redrive ', h('span', { class: 'mono' }, id)),
    sec,
    h('section', { 'aria-labelledby': 'items-title' },
      h('h2', { id: 'items-title' }, 'Items'),
      h('form', { class: 'filters', role: 'search', 'aria-label': 'Items by outcome' }, field('Outcome', pick)),
      h('div', { class: 'scroll', id: 'redrive-items' },
        table('Items', ['Dead letter', 'Outcome', 'Why', 'At'], rows, outcome === 'failed' ? 'Every item replayed.' : 'No item.')),
      h('nav', { class: 'pager', 'aria-label': 'Pages' },
        q.get('after') ? h('a', { href: `#/redrives/${eid}?${first}` }, 'First page') : null,
        items.next ? h('a', { href: `#/redrives/${eid}?${nq}`, rel: 'next' }, 'Next page') : null)));
  poll();
}

// runnerText: who runs the redrive and when it was last seen.
function runnerText(s) {
  if (!s.runner) return s.status === 'running' ? 'none seen: resumable' : '—';
  const seen = s.heartbeat_at ? ` (last seen ${fmtTime(s.heartbeat_at)})` : '';
  return `${s.runner}${seen}${s.runner_alive ? '' : ': not seen lately, resumable'}`;
}

// filterText: a redrive's filter on one line (the operator's reason left
// out; the detail page shows everything).
function filterText(f) {
  if (!f) return '';
  const { operator_reason: _, ...rest } = f;
  return JSON.stringify(rest);
}
