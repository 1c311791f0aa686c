// Dead letters: the filtered list, and one dead letter with its attempts,
// history and the admin's actions (replay with a previewed merge patch,
// discard with a reason, resolve with a note).
import { api, h, clear, can, flash, flashNext, errorText, fmtTime, badge, table, field, pretty, live, debounce,
  shortId, panel, stateTabs, countsURL, sortSelect } from './lib.js';
import { executionsSection, timelineSection, attributesList, payloadSection, EXECUTIONS_WINDOW } from './tasks.js';

const reasons = ['', 'attempts_exhausted', 'permanent_error', 'expired', 'poison'];
const statuses = ['open', 'replayed', 'discarded', 'resolved'];

// renders numbers the list's reads (the newest one's groups are kept);
// lastGroups is the newest groups answer and its filter.
let renders = 0;
let lastGroups = null;

// dlqListPage renders the list; again: a re-read of the page shown (its
// last groups are shown until the new ones answer).
export async function dlqListPage(main, q, again = false) {
  // Newest first unless the address says otherwise.
  const order = q.get('order') || 'newest';
  // The reads go out first; the forms are built while they are answered.
  const api_q = new URLSearchParams();
  for (const k of ['queue', 'kind', 'reason', 'error_contains', 'attr', 'since', 'until', 'where']) if (q.get(k)) api_q.set(k, q.get(k));
  const st = q.get('status') ?? 'open';
  if (st) api_q.set('status', st);
  api_q.set('limit', '50');
  api_q.set('order', order);
  if (q.get('after')) api_q.set('after', q.get('after'));
  const gq = new URLSearchParams(api_q);
  gq.delete('limit');
  gq.delete('after');
  gq.delete('order');
  // The list is shown when it answers; the groups (a count of the whole
  // filter, slower) fill their panel, the totals and the bulk panel when
  // they answer.
  const listRead = api('GET', `/v1/dlq?${api_q}`);
  listRead.catch(() => {}); // awaited below
  const groupsRead = api('GET', `/v1/dlq/groups?${gq}`);
  groupsRead.catch(() => {}); // awaited below
  const seq = ++renders;
  // The tabs' counts arrive when they arrive: the list does not wait.
  const counts = api('GET', countsURL(q.get('queue')));
  counts.catch(() => {});
  const f = {
    queue: h('input', { id: 'f-queue', name: 'queue', value: q.get('queue') || '' }),
    kind: h('input', { id: 'f-kind', name: 'kind', value: q.get('kind') || '' }),
    reason: h('select', { id: 'f-reason', name: 'reason' },
      reasons.map((r) => h('option', { value: r, selected: q.get('reason') === r }, r || 'any'))),
    status: h('select', { id: 'f-status', name: 'status' },
      ['', ...statuses].map((s) => h('option', { value: s, selected: (q.get('status') ?? 'open') === s }, s || 'any'))),
    error: h('input', { id: 'f-error', name: 'error_contains', value: q.get('error_contains') || '' }),
    attr: h('input', { id: 'f-attr', name: 'attr', placeholder: 'key=value', value: q.get('attr') || '' }),
    since: h('input', { id: 'f-since', name: 'since', placeholder: '24h, 7d or a time', value: q.get('since') || '' }),
    until: h('input', { id: 'f-until', name: 'until', placeholder: '1h, 2d or a time', value: q.get('until') || '' }),
    where: h('input', { id: 'f-where', name: 'where', placeholder: 'payload.customer.id == 42', size: 36, spellcheck: 'false',
      value: q.get('where') || '' }),
  };
  // A filter the server refuses (a typo in the where box) is said beside
  // the box; the form keeps what was typed.
  const whereErr = h('p', { class: 'error', role: 'alert', id: 'where-error' });
  const form = h('form', { class: 'filters', id: 'dlq-filters', role: 'search', 'aria-label': 'Filter dead letters' },
    field('Queue', f.queue), field('Kind', f.kind), field('Reason', f.reason), field('Status', f.status),
    field('Error contains', f.error), field('Attribute', f.attr), field('Dead since', f.since), field('Dead until', f.until),
    h('div', { class: 'where' }, field('Where (a CEL condition on payload and attributes)', f.where), whereErr),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (order !== 'newest') p.set('order', order);
    if (f.queue.value) p.set('queue', f.queue.value);
    if (f.kind.value) p.set('kind', f.kind.value);
    if (f.reason.value) p.set('reason', f.reason.value);
    p.set('status', f.status.value);
    if (f.error.value) p.set('error_contains', f.error.value);
    if (f.attr.value) p.set('attr', f.attr.value);
    if (f.since.value) p.set('since', f.since.value);
    if (f.until.value) p.set('until', f.until.value);
    if (f.where.value) p.set('where', f.where.value);
    location.hash = `#/dlq?${p}`;
  });
  let page;
  try {
    page = await listRead;
  } catch (e) {
    if (e.status !== 400) throw e;
    clear(whereErr, errorText(e));
    clear(main, h('h1', {}, 'Dead letters'), panel('dlq-filters-panel', 'Filters', form, { open: true }),
      h('p', { class: 'muted', id: 'dlq-refused' }, 'The filter was refused: see beside the where box.'));
    return;
  }
  // An admin looking at open dead letters can pick rows (selectionSection).
  const picking = can('admin') && st === 'open' && page.items.length > 0;
  const rows = page.items.map((t) => [
    picking ? h('input', { type: 'checkbox', class: 'pick', 'aria-label': `Select dead letter ${t.id}`, dataset: { id: t.id } }) : null,
    shortId(t.id, `#/dlq/${encodeURIComponent(t.id)}`),
    t.queue, t.kind, badge(t.reason || '', 'reason'), badge(t.dlq_status || '', t.dlq_status),
    h('span', { class: 'err', title: t.last_error || '' }, t.last_error), String(t.attempt), fmtTime(t.last_seen),
  ]);
  const listDiv = h('div', { class: 'scroll', id: 'dlq-list' },
    table('Dead letters', [picking ? h('input', { type: 'checkbox', id: 'pick-all', 'aria-label': 'Select every dead letter of this page' }) : null,
      'Id', 'Queue', 'Kind', 'Reason', 'Status', 'Last error', 'Attempts', 'Last seen'].filter((x) => x !== null),
    rows.map((r) => (picking ? r : r.slice(1))), 'No dead letter matches.', 'list'));
  const next = page.next_cursor;
  const nq = new URLSearchParams(q);
  if (next) nq.set('after', next);
  // Export: the same filters, as NDJSON (GET /v1/dlq/export), downloaded.
  const exportLink = h('a', { href: `/v1/dlq/export?${gq}`, download: 'dead-letters.ndjson', id: 'dlq-export' },
    'Export the matching as NDJSON');
  // The tabs and the sort keep the other filters and start at the first page.
  const withParam = (k, v) => {
    const p = withoutAfter(q);
    p.set(k, v);
    return `#/dlq?${p}`;
  };
  const tabs = stateTabs('dlq-tabs', [...statuses, ''], st, (s) => withParam('status', s),
    (c) => ({ ...c.dead_letters, '': Object.values(c.dead_letters).reduce((a, b) => a + b, 0) }), q.get('queue'), counts);
  const sort = sortSelect('dlq-order', order, (v) => { location.hash = withParam('order', v); });
  const active = ['queue', 'kind', 'reason', 'error_contains', 'attr', 'since', 'until', 'where']
    .filter((k) => q.get(k)).map((k) => `${k}=${q.get(k)}`);
  // The groups' panel, the totals and the bulk panel's counts wait for the
  // groups; the bulk panel itself (a running or finished replay of this
  // filter) is shown at once, so a re-render never drops it.
  const total = h('span', { id: 'dlq-total' }, 'counting…');
  const groupsSlot = h('div', { id: 'dlq-groups-slot' }, h('p', { class: 'muted', id: 'dlq-groups-wait' }, 'Counting the matching dead letters…'));
  const bulkTitle = h('span', {}, 'Bulk: replay, discard or resolve all matching');
  const bulkSec = can('admin') && st === 'open' ? bulkSection(main, q) : null;
  const fill = (groups) => {
    clear(total, `${groups.total} match`);
    clear(groupsSlot, groupsSection(q, groups));
    clear(exportLink, `Export the ${groups.total} matching as NDJSON`);
    clear(bulkTitle, `Bulk: replay, discard or resolve all ${groups.total} matching`);
    if (bulkSec) bulkSec.fill(groups.total);
  };
  // A re-read of this same page (the live refresh, the end of a bulk
  // action) shows the groups it had until the new ones answer.
  const key = gq.toString();
  if (again && lastGroups && lastGroups.key === key) fill(lastGroups.groups);
  groupsRead.then((groups) => {
    if (seq === renders) lastGroups = { key, groups };
    fill(groups);
  }, (e) => {
    clear(groupsSlot, h('p', { class: 'error', role: 'alert', id: 'dlq-groups-error' }, `The counts could not be read: ${errorText(e)}`));
  });
  clear(main,
    h('h1', {}, 'Dead letters'),
    h('div', { class: 'toolbar' }, tabs, h('label', { class: 'sort' }, 'Sort ', sort)),
    panel('dlq-filters-panel', ['Filters', active.length ? h('span', { class: 'muted small', id: 'dlq-active' }, ` · ${active.join(' · ')}`) : null], form),
    panel('dlq-groups-panel', [total, h('span', { class: 'muted small' }, ' · by reason and by error, export')],
      [groupsSlot, h('p', { class: 'small' }, exportLink)]),
    bulkSec ? panel('dlq-bulk-panel', bulkTitle, bulkSec) : null,
    picking ? selectionSection(listDiv) : null,
    listDiv,
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      q.get('after') ? h('a', { href: `#/dlq?${withoutAfter(q)}` }, 'First page') : null,
      next ? h('a', { href: `#/dlq?${nq}`, rel: 'next' }, 'Next page') : null));
  // A re-render would drop what an admin is filling in (a patch, a reason,
  // a preview waiting for its confirm): it waits until the forms are idle.
  const busy = () => [...main.querySelectorAll('#bulk textarea, #bulk input, #close input, #selection input')]
    .some((x) => (x.type === 'checkbox' ? x.checked : x.value))
    || [...main.querySelectorAll('#bulk-confirm, #close-confirm')].some((x) => !x.hidden);
  const refresh = debounce(() => {
    if (!(location.hash.startsWith('#/dlq?') || location.hash === '#/dlq') || !main.isConnected) return;
    if (busy()) {
      refresh();
      return;
    }
    dlqListPage(main, q, true).catch(() => {});
  }, 3000);
  live(main, 'type.task.dead_lettered', refresh);
}

// groupsSection: the filter's dead letters counted by reason and by error
// (on the server); each group links to the list narrowed to it.
function groupsSection(q, g) {
  const narrowed = (key, value) => {
    const p = withoutAfter(q);
    p.set(key, value);
    if (!p.has('status')) p.set('status', 'open');
    return `#/dlq?${p}`;
  };
  const list = (id, caption, items, key) => h('table', { id, class: 'groups' },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, key === 'reason' ? 'Reason' : 'Error'), h('th', { scope: 'col' }, 'Count'))),
    h('tbody', {}, items.map((x) => h('tr', {},
      h('td', {}, x.value ? h('a', { href: narrowed(key, x.value), class: key === 'reason' ? '' : 'err' }, x.value) : h('span', { class: 'muted' }, '(none)')),
      h('td', {}, String(x.count))))));
  return h('section', { class: 'groups-row', 'aria-label': 'Grouped counts', id: 'dlq-groups', 'data-total': String(g.total) },
    h('p', { class: 'stat' }, h('span', { class: 'n' }, String(g.total)), ' dead letters match this filter'),
    list('groups-reason', 'By reason', g.by_reason, 'reason'),
    list('groups-error', g.more_errors ? `By error (the ${g.by_error.length} largest groups)` : 'By error', g.by_error, 'error_contains'));
}

// The bulk replay of "all N matching this filter" runs as a redrive in the
// server (POST /v1/dlq/redrive); its progress is polled from GET
// /v1/redrives/{id} while the page shows it. Cancel stops it after the
// current batch; Resume posts the same redrive again, which continues it.
// It may carry a merge patch and the operator's reason (why). Preview is
// the redrive's dry run: how many match now and a sample, each with its
// payload's before/after under the patch; nothing changes. A replay with a
// patch, or of more than confirmOver dead letters, shows that preview first
// and waits for its confirm.
//
// A redrive started here is kept by its filter ({req, st}), outside the
// page's elements: every re-render of that filter (the live refresh, the
// end of an action, a filter changed and changed back) shows it again and
// follows it while it runs.
const jobs = new Map();
const confirmOver = 100;
// filterOf: the key of a redrive request's filter (the patch, the reason
// and the pace are not part of it).
const filterOf = (r) => JSON.stringify({ ...r, rate: undefined, merge_patch: undefined, why: undefined });

function redriveRequest(q) {
  const req = {};
  for (const k of ['queue', 'kind', 'reason', 'error_contains', 'where']) if (q.get(k)) req[k] = q.get(k);
  const attr = q.get('attr');
  if (attr) {
    const i = attr.indexOf('=');
    if (i > 0) req.attributes = { [attr.slice(0, i)]: attr.slice(i + 1) };
  }
  for (const k of ['since', 'until']) {
    const v = q.get(k);
    if (!v) continue;
    const m = v.match(/^(\d+)([smhd])$/);
    const unit = { s: 1e3, m: 6e4, h: 36e5, d: 864e5 };
    const t = m ? new Date(Date.now() - Number(m[1]) * unit[m[2]]) : new Date(v);
    if (isNaN(t)) return null;
    req[k] = t.toISOString();
  }
  // No filter means every open dead letter, which the API wants said.
  if (Object.keys(req).length === 0) req.all = true;
  return req;
}

// bulkSection is shown before the filter's count is known: its job at once,
// its actions once fill(total) gives the count (sec.fill).
function bulkSection(main, q) {
  const req = redriveRequest(q);
  const fkey = req ? filterOf(req) : null;
  let total = null;
  const bar = h('progress', { id: 'bulk-progress', max: '1', value: '0', 'aria-label': 'Replayed of the selection' });
  const text = h('span', { id: 'bulk-text', role: 'status', 'aria-live': 'polite' });
  const start = h('button', { type: 'button', class: 'primary', id: 'bulk-replay' });
  const cancel = h('button', { type: 'button', id: 'bulk-cancel', hidden: true }, 'Cancel');
  const resume = h('button', { type: 'button', id: 'bulk-resume', hidden: true }, 'Resume');
  const err = h('p', { class: 'error', role: 'alert', id: 'bulk-error' });
  const rate = h('input', { id: 'bulk-rate', name: 'rate', type: 'number', min: '0', step: 'any', placeholder: 'unthrottled', size: 8 });
  const patch = h('textarea', { id: 'bulk-patch', name: 'merge_patch', rows: 3, spellcheck: 'false', placeholder: '{"key": "new value", "remove_me": null}' });
  const why = h('input', { id: 'bulk-why', name: 'why', autocomplete: 'off', size: 40 });
  const previewBtn = h('button', { type: 'button', id: 'bulk-preview' }, 'Preview');
  const actions = h('span', { class: 'bulk-actions' });
  const preview = h('div', { id: 'bulk-preview-out', class: 'preview', 'aria-live': 'polite', hidden: true });
  const confirmBtn = h('button', { type: 'button', class: 'primary', id: 'bulk-confirm', hidden: true }, 'Confirm replay');
  const sec = h('section', { class: 'card bulk', id: 'bulk', 'aria-label': 'Bulk replay' },
    field('Merge patch for each (optional, RFC 7396)', patch), field('Why (recorded on each replay)', why),
    field('Replays a second (empty: as fast as it goes)', rate), actions, preview, confirmBtn, bar, text, cancel, resume, err);
  // The request from the form: the filter, the patch, the reason, the pace.
  const request = () => {
    const r = { ...req };
    const txt = patch.value.trim();
    if (txt) {
      try {
        r.merge_patch = JSON.parse(txt);
      } catch (e) {
        throw new Error(`The merge patch is not JSON: ${e.message}`);
      }
    }
    if (why.value.trim()) r.why = why.value.trim();
    if (Number(rate.value) > 0) r.rate = Number(rate.value);
    return r;
  };
  // showPreview runs the dry run of r and shows it; it returns how many match.
  const showPreview = async (r) => {
    const { rate: _, ...dry } = r;
    const p = (await api('POST', '/v1/dlq/redrive', { ...dry, dry_run: true, sample: 5 })).preview;
    const items = (p.sample || []).map((x) => h('li', { class: 'sample', dataset: { id: x.id } },
      h('a', { href: `#/dlq/${encodeURIComponent(x.id)}`, class: 'mono' }, x.id), ' ', h('span', { class: 'err' }, x.error || ''),
      x.diff ? diffView(x.diff) : null));
    clear(preview, h('p', { class: 'stat', id: 'bulk-matched', dataset: { matched: String(p.matched) } },
      h('span', { class: 'n' }, String(p.matched)), r.merge_patch ? ' would be replayed with this patch; a sample:' : ' would be replayed; a sample:'),
    h('ul', { class: 'samples' }, items));
    preview.hidden = false;
    return p.matched;
  };
  const show = () => {
    const job = jobs.get(fkey);
    const st = job && job.st;
    bar.hidden = !st;
    if (!st) return;
    bar.max = Math.max(st.total, 1);
    bar.value = st.replayed + st.failed;
    clear(text, `${st.replayed} of ${st.total} replayed${st.failed ? `, ${st.failed} failed` : ''} · ${st.status} · `,
      h('a', { href: `#/redrives/${encodeURIComponent(st.redrive_id)}`, id: 'bulk-details' }, 'each item\'s outcome'));
    sec.dataset.status = st.status;
    cancel.hidden = st.status !== 'running';
    resume.hidden = !['canceled', 'interrupted', 'stopped', 'over_budget', 'failed'].includes(st.status);
    start.disabled = st.status === 'running' || !total;
  };
  // When the redrive ends, the page is read again: the counts, the tabs
  // and the list say what it left (this section shows the redrive still).
  const poll = async () => {
    // The section is built before the page places it: look once it is
    // placed, or a section built for a running redrive (a re-read of the
    // page while a resume was out) would never poll and show it running
    // forever.
    await new Promise((r) => setTimeout(r, 0));
    let polled = false;
    for (let job; (job = jobs.get(fkey)) && job.st.status === 'running' && sec.isConnected;) {
      await new Promise((r) => setTimeout(r, 500));
      try {
        job.st = await api('GET', `/v1/redrives/${encodeURIComponent(job.st.redrive_id)}`);
      } catch (e) {
        clear(err, errorText(e));
        return;
      }
      polled = true;
      show();
    }
    if (polled && sec.isConnected) rerender(main, q);
  };
  // resuming: a canceled redrive's runner stops after its current batch;
  // until it is gone the same redrive is refused (409), so a resume asks
  // again for a few seconds.
  const run = async (r, resuming = false) => {
    clear(err);
    let job;
    for (let tries = 0; ; tries++) {
      try {
        job = { req: r, st: await api('POST', '/v1/dlq/redrive', r) };
        jobs.set(fkey, job);
        break;
      } catch (e) {
        if (resuming && e.status === 409 && tries < 20) {
          clear(text, 'waiting for the stopped run to let go…');
          await new Promise((res) => setTimeout(res, 500));
          continue;
        }
        clear(err, errorText(e));
        return;
      }
    }
    // The page may have been read again while the request was out (a
    // redrive that just stopped re-reads it): the section shown now
    // follows the redrive then.
    if (job.st.status === 'running' && sec.isConnected) {
      show();
      poll();
    } else {
      rerender(main, q);
    }
  };
  let pending = null; // the request a shown preview waits to confirm
  const previewThen = async (confirmIt) => {
    clear(err);
    confirmBtn.hidden = true;
    try {
      pending = request();
      const n = await showPreview(pending);
      if (confirmIt) {
        clear(confirmBtn, `Confirm: replay these ${n}`);
        confirmBtn.hidden = n === 0;
        confirmBtn.focus();
      }
    } catch (e) {
      clear(err, errorText(e));
    }
  };
  previewBtn.addEventListener('click', () => previewThen(true));
  start.addEventListener('click', () => {
    let r;
    try {
      r = request();
    } catch (e) {
      clear(err, errorText(e));
      return;
    }
    if (r.merge_patch !== undefined || !(total <= confirmOver)) {
      previewThen(true);
      return;
    }
    run(r);
  });
  confirmBtn.addEventListener('click', () => {
    confirmBtn.hidden = true;
    preview.hidden = true;
    run(pending);
  });
  resume.addEventListener('click', () => run(jobs.get(fkey).req, true));
  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    const job = jobs.get(fkey);
    try {
      job.st = await api('POST', `/v1/redrives/${encodeURIComponent(job.st.redrive_id)}/cancel`);
    } catch (e) {
      clear(err, errorText(e));
    }
    cancel.disabled = false;
    show();
  });
  if (!req) clear(err, 'Bulk replay needs "Dead since" and "Dead until" as an age (24h, 7d) or a time.');
  // A redrive of this same filter started earlier (with any patch, reason
  // or pace): show it.
  if (req && jobs.has(fkey)) {
    show();
    poll();
  } else {
    bar.hidden = true;
  }
  // The count arrives: the actions take it (a later count, the same
  // filter's fresh one after the kept one, updates them).
  let close = null;
  sec.fill = (n) => {
    total = n;
    clear(start, `Replay all ${total} matching this filter`);
    const job = jobs.get(fkey);
    start.disabled = total === 0 || !req || (!!job && job.st.status === 'running');
    previewBtn.disabled = total === 0 || !req;
    if (!actions.firstChild) actions.append(previewBtn, start);
    if (!req) return;
    if (!close) sec.append(close = closeSection(main, q, req, total));
    else close.setTotal(total);
  };
  return sec;
}

// diffView shows a patch's effect on one payload: the changed places, and
// the payload before and after (or why the patch does not apply).
function diffView(d) {
  return h('div', { class: 'diff' },
    h('ul', { class: 'changes' }, (d.changes || []).map((c) => h('li', { class: `op-${c.op}`, dataset: { op: c.op, path: c.path } },
      h('span', { class: 'mono' }, `${c.op} ${c.path}`)))),
    d.error ? h('p', { class: 'error' }, `The patch does not apply: ${d.error}`) : null,
    h('div', { class: 'before-after' },
      h('pre', { class: 'json before', 'aria-label': 'Before' }, pretty(d.before)),
      d.after ? h('pre', { class: 'json after', 'aria-label': 'After' }, pretty(d.after)) : null));
}

// The rows an admin picked on this page: replay them (same id), discard
// them with a reason or resolve them with a note, one call each
// (POST /v1/dlq/{id}/replay|discard|resolve), with the count done.
function selectionSection(list) {
  const count = h('span', { id: 'selection-count', role: 'status', 'aria-live': 'polite' }, '0 selected');
  const why = h('input', { id: 'selection-why', name: 'why', autocomplete: 'off', size: 32 });
  const text = h('span', { id: 'selection-text', role: 'status', 'aria-live': 'polite' });
  const err = h('p', { class: 'error', role: 'alert', id: 'selection-error' });
  const buttons = ['replay', 'discard', 'resolve'].map((a) =>
    h('button', { type: 'button', id: `selection-${a}`, disabled: true, dataset: { action: a } }, `${a[0].toUpperCase()}${a.slice(1)} selected`));
  const picked = () => [...list.querySelectorAll('input.pick:checked')].map((c) => c.dataset.id);
  const update = () => {
    const n = picked().length;
    clear(count, `${n} selected`);
    for (const b of buttons) b.disabled = n === 0;
  };
  list.addEventListener('change', (ev) => {
    if (ev.target.id === 'pick-all') {
      for (const c of list.querySelectorAll('input.pick')) c.checked = ev.target.checked;
    }
    if (ev.target.classList.contains('pick') || ev.target.id === 'pick-all') update();
  });
  for (const b of buttons) {
    b.addEventListener('click', async () => {
      const action = b.dataset.action;
      const ids = picked();
      clear(err);
      if (action !== 'replay' && !why.value.trim()) {
        clear(err, action === 'discard' ? 'Give the reason for discarding them.' : 'Say how they were handled.');
        why.focus();
        return;
      }
      for (const x of buttons) x.disabled = true;
      let done = 0;
      const failed = [];
      for (const id of ids) {
        const body = action === 'discard' ? { reason: why.value.trim() } : action === 'resolve' ? { note: why.value.trim() }
          : (why.value.trim() ? { reason: why.value.trim() } : {});
        try {
          await api('POST', `/v1/dlq/${encodeURIComponent(id)}/${action}`, body);
          done++;
        } catch (e) {
          failed.push(`${id}: ${errorText(e)}`);
        }
        clear(text, `${done} of ${ids.length} ${{ replay: 'replayed', discard: 'discarded', resolve: 'resolved' }[action]}`);
      }
      if (failed.length) clear(err, failed.join('; '));
      update();
    });
  }
  return h('section', { class: 'card selection', id: 'selection', 'aria-label': 'Selected dead letters' },
    count, field('Reason (discard) or note (resolve); optional for a replay', why), buttons, text, err);
}

// Discard or resolve "all N matching": POST /v1/dlq/close a batch at a time
// (each dead letter gets its own history event), with the first answer's
// snapshot, while it says more. Stop cancels after the current batch;
// running it again resumes (the closed ones no longer match). A discard
// (retention deletes discarded dead letters), or a resolve of more than
// confirmOver, shows first how many match and a sample (the redrive's dry
// run selects the same open dead letters) and waits for its confirm. When
// it ends the page is read again (its counts), the outcome kept in the
// flash.
function closeSection(main, q, req, total) {
  const why = h('input', { id: 'close-why', name: 'why', required: true, autocomplete: 'off', size: 40 });
  const bar = h('progress', { id: 'close-progress', max: String(Math.max(total, 1)), value: '0', hidden: true, 'aria-label': 'Closed of the selection' });
  const text = h('span', { id: 'close-text', role: 'status', 'aria-live': 'polite' });
  const err = h('p', { class: 'error', role: 'alert', id: 'close-error' });
  const discard = h('button', { type: 'button', id: 'close-discard', disabled: total === 0 }, `Discard all ${total} matching`);
  const resolve = h('button', { type: 'button', id: 'close-resolve', disabled: total === 0 }, `Resolve all ${total} matching`);
  const stop = h('button', { type: 'button', id: 'close-stop', hidden: true }, 'Stop');
  const preview = h('div', { id: 'close-preview', class: 'preview', 'aria-live': 'polite', hidden: true });
  const confirmBtn = h('button', { type: 'button', class: 'danger', id: 'close-confirm', hidden: true });
  const cancelBtn = h('button', { type: 'button', id: 'close-cancel', hidden: true }, 'Cancel');
  let running = false;
  let pending = null; // the status a shown preview waits to confirm
  const hidePreview = () => {
    preview.hidden = confirmBtn.hidden = cancelBtn.hidden = true;
    pending = null;
  };
  const ask = async (status) => {
    clear(err);
    if (!why.value.trim()) {
      clear(err, status === 'discarded' ? 'Give the reason for discarding them.' : 'Say how they were handled.');
      why.focus();
      return;
    }
    if (status === 'resolved' && total <= confirmOver) {
      run(status);
      return;
    }
    try {
      const p = (await api('POST', '/v1/dlq/redrive', { ...req, dry_run: true, sample: 5 })).preview;
      const verb = status === 'discarded' ? 'discarded' : 'resolved';
      clear(preview, h('p', { class: 'stat', id: 'close-matched', dataset: { matched: String(p.matched) } },
        h('span', { class: 'n' }, String(p.matched)), ` would be ${verb}; a sample:`),
      h('ul', { class: 'samples' }, (p.sample || []).map((x) => h('li', { class: 'sample', dataset: { id: x.id } },
        shortId(x.id, `#/dlq/${encodeURIComponent(x.id)}`), ' ', h('span', { class: 'err' }, x.error || '')))));
      clear(confirmBtn, `Confirm: ${status === 'discarded' ? 'discard' : 'resolve'} these ${p.matched}`);
      preview.hidden = false;
      confirmBtn.hidden = p.matched === 0;
      cancelBtn.hidden = false;
      pending = status;
      confirmBtn.focus();
    } catch (e) {
      clear(err, errorText(e));
    }
  };
  const run = async (status) => {
    hidePreview();
    running = true;
    stop.hidden = false;
    discard.disabled = resolve.disabled = true;
    bar.hidden = false;
    let done = 0;
    let snapshot;
    try {
      for (;;) {
        const body = { ...req, status, limit: 200 };
        if (status === 'discarded') body.why = why.value.trim();
        else body.note = why.value.trim();
        if (snapshot) body.snapshot = snapshot;
        const r = await api('POST', '/v1/dlq/close', body);
        snapshot = r.snapshot;
        done += r.closed;
        bar.value = done;
        clear(text, `${done} of ${total} ${status}${r.skipped ? `, ${r.skipped} changed by someone else` : ''}${r.more && running ? '…' : ''}`);
        if (!r.more || !running) break;
      }
      if (!running) clear(text, `${done} ${status}; stopped (run it again to go on)`);
      flash(text.textContent);
      running = false;
      rerender(main, q);
      return;
    } catch (e) {
      clear(err, errorText(e));
    }
    running = false;
    stop.hidden = true;
    discard.disabled = resolve.disabled = false;
  };
  discard.addEventListener('click', () => ask('discarded'));
  resolve.addEventListener('click', () => ask('resolved'));
  confirmBtn.addEventListener('click', () => { if (pending) run(pending); });
  cancelBtn.addEventListener('click', hidePreview);
  stop.addEventListener('click', () => { running = false; });
  const el = h('div', { class: 'bulk-close', id: 'close' },
    field('Reason (discard) or note (resolve), recorded on each', why), discard, resolve, stop, preview, confirmBtn, cancelBtn, bar, text, err);
  // A later count of the same filter (the fresh one after the kept one).
  el.setTotal = (n) => {
    total = n;
    bar.max = String(Math.max(total, 1));
    clear(discard, `Discard all ${total} matching`);
    clear(resolve, `Resolve all ${total} matching`);
    if (!running) discard.disabled = resolve.disabled = total === 0;
  };
  return el;
}

// rerender reads the list page again now (after a bulk action ended),
// whatever is typed in its forms.
function rerender(main, q) {
  if (main.isConnected && (location.hash.startsWith('#/dlq?') || location.hash === '#/dlq')) dlqListPage(main, q, true).catch(() => {});
}

function withoutAfter(q) {
  const p = new URLSearchParams(q);
  p.delete('after');
  return p;
}

export async function dlqPage(main, id) {
  const path = `/v1/dlq/${encodeURIComponent(id)}`;
  const t = await api('GET', `${path}?executions_limit=${EXECUTIONS_WINDOW}`);
  const actions = h('section', { class: 'actions', 'aria-labelledby': 'actions-title' });
  if (can('admin') && t.dlq_status === 'open') actions.append(...adminActions(main, t));
  else if (can('admin')) actions.append(h('p', { class: 'muted' }, `This dead letter is ${t.dlq_status}: nothing to do.`));
  clear(main,
    h('p', {}, h('a', { href: '#/dlq' }, '← Dead letters')),
    h('h1', {}, 'Dead letter ', h('span', { class: 'mono' }, t.id)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Queue'), h('dd', {}, t.queue),
      h('dt', {}, 'Kind'), h('dd', {}, t.kind),
      h('dt', {}, 'Reason'), h('dd', {}, badge(t.reason || '', 'reason')),
      h('dt', {}, 'Status'), h('dd', { id: 'dlq-status' }, badge(t.dlq_status || '', t.dlq_status)),
      h('dt', {}, 'Attempts'), h('dd', {}, `${t.attempt} of ${t.max_attempts}`),
      h('dt', {}, 'Dead'), h('dd', {}, `${t.dead_count} time(s); first ${fmtTime(t.first_seen)}, last ${fmtTime(t.last_seen)}`),
      h('dt', {}, 'Replays'), h('dd', {}, String(t.replay_count || 0)),
      h('dt', {}, 'Last error'), h('dd', { class: 'err', id: 'last-error' }, t.last_error),
      h('dt', {}, 'Task page'), h('dd', {}, h('a', { href: `#/tasks/${encodeURIComponent(t.id)}` }, 'executions and logs'))),
    h('section', { 'aria-labelledby': 'actions-title' }, h('h2', { id: 'actions-title' }, 'Actions'),
      can('admin') ? actions : h('p', { class: 'muted', id: 'no-actions' }, 'Replay, discard and resolve need the admin role.')),
    payloadSection(t),
    h('section', { 'aria-labelledby': 'attrs-title' }, h('h2', { id: 'attrs-title' }, 'Attributes'), attributesList(t.attributes)),
    executionsSection(t, path),
    timelineSection(t.events));
  // A re-render would drop an action the admin is filling in (a patch, a
  // preview waiting for its confirm, a reason or a note): it waits until
  // the forms are idle. A raw view (task.payload_viewed) changes nothing
  // shown but the timeline.
  const busy = () => [...main.querySelectorAll('.actions textarea, .actions input')].some((x) => (x.type === 'checkbox' ? x.checked : x.value))
    || [...main.querySelectorAll('#replay-confirm, #preview')].some((x) => !x.hidden);
  const refresh = debounce(() => {
    if (!location.hash.startsWith('#/dlq/') || !main.isConnected) return;
    if (busy()) {
      refresh();
      return;
    }
    dlqPage(main, id).catch(() => {});
  }, 1000);
  live(main, `task.${id}`, (e) => { if (e.type !== 'task.payload_viewed' && !seen(t.events, e)) refresh(); });
}

// seen: the page already shows this event (the stream starts at the
// beginning of the task's history).
function seen(events, e) { return (events || []).some((x) => x.id === e.id); }

function adminActions(main, t) {
  const id = encodeURIComponent(t.id);
  const patch = h('textarea', { id: 'merge-patch', rows: 5, spellcheck: 'false',
    placeholder: '{"key": "new value", "remove_me": null}' });
  const preview = h('pre', { class: 'json', id: 'preview', 'aria-live': 'polite', hidden: true });
  const confirm = h('button', { type: 'button', class: 'primary', id: 'replay-confirm', hidden: true }, 'Confirm replay');
  const status = h('p', { class: 'error', role: 'alert', id: 'replay-error' });
  let pending = null;
  const newID = h('input', { type: 'checkbox', id: 'replay-new-id', name: 'new_id' });
  const why = h('input', { id: 'replay-why', name: 'reason', autocomplete: 'off', size: 40 });
  const body = () => {
    const txt = patch.value.trim();
    const b = txt ? { merge_patch: JSON.parse(txt) } : {};
    if (newID.checked) b.new_id = true;
    if (why.value.trim()) b.reason = why.value.trim();
    return b;
  };
  const replayForm = h('form', { class: 'card', id: 'replay-form', 'aria-labelledby': 'replay-title' },
    h('h3', { id: 'replay-title' }, 'Replay'),
    h('p', { class: 'muted small' }, 'Runs the task again under the same id. Optionally change the payload with a JSON merge patch (RFC 7396); preview the result before you confirm.'),
    field('Merge patch (optional)', patch),
    field('Why (recorded in the history)', why),
    h('div', { class: 'check' }, newID, h('label', { for: 'replay-new-id' }, 'Replay as a new task (a new id; this dead letter is kept, marked replayed)')),
    h('button', { type: 'submit', id: 'replay-preview' }, 'Preview replay'),
    status, preview, confirm);
  replayForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(status);
    confirm.hidden = true;
    try {
      pending = body();
    } catch (e) {
      clear(status, `The merge patch is not JSON: ${e.message}`);
      return;
    }
    try {
      const p = await api('POST', `/v1/dlq/${id}/replay/preview`, pending);
      clear(preview, pretty(p.payload));
      preview.hidden = false;
      preview.setAttribute('aria-label', 'The payload the replay will run with');
      confirm.hidden = false;
      confirm.focus();
    } catch (e) {
      clear(status, errorText(e));
    }
  });
  confirm.addEventListener('click', async () => {
    confirm.disabled = true;
    try {
      const r = await api('POST', `/v1/dlq/${id}/replay`, pending);
      if (r.replayed && r.new_id) {
        flashNext(`Replayed ${t.id} as the new task ${r.new_id}: it is ${r.task ? r.task.state : 'waiting'}.`);
        location.hash = `#/tasks/${encodeURIComponent(r.new_id)}`;
        return;
      }
      flashNext(r.replayed ? `Replayed ${t.id}: it is ${r.task ? r.task.state : 'waiting'} again.` : `Not replayed: it is ${r.state} (${r.dlq_status}).`);
      location.hash = `#/tasks/${id}`;
    } catch (e) {
      clear(status, errorText(e));
      confirm.disabled = false;
    }
  });

  const reason = h('input', { id: 'discard-reason', required: true });
  const discardErr = h('p', { class: 'error', role: 'alert' });
  const discard = h('form', { class: 'card', id: 'discard-form', 'aria-labelledby': 'discard-title' },
    h('h3', { id: 'discard-title' }, 'Discard'),
    field('Reason (required)', reason), discardErr,
    h('button', { type: 'submit', class: 'danger' }, 'Discard'));
  discard.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api('POST', `/v1/dlq/${id}/discard`, { reason: reason.value });
      flash(`Discarded ${t.id}.`);
      await dlqPage(main, t.id);
    } catch (e) {
      clear(discardErr, errorText(e));
    }
  });

  const note = h('input', { id: 'resolve-note' });
  const resolveErr = h('p', { class: 'error', role: 'alert' });
  const resolve = h('form', { class: 'card', id: 'resolve-form', 'aria-labelledby': 'resolve-title' },
    h('h3', { id: 'resolve-title' }, 'Resolve'),
    field('Note (optional)', note), resolveErr,
    h('button', { type: 'submit' }, 'Resolve'));
  resolve.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api('POST', `/v1/dlq/${id}/resolve`, note.value ? { note: note.value } : {});
      flash(`Resolved ${t.id}.`);
      await dlqPage(main, t.id);
    } catch (e) {
      clear(resolveErr, errorText(e));
    }
  });
  return [replayForm, discard, resolve];
}
