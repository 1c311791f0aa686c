// Task actions (admin): cancel, run now, delete or change the priority of
// the rows picked on the tasks list, or of all the tasks matching its
// filter. Either runs as one bulk job in the server (POST /v1/tasks/bulk),
// polled from GET /v1/redrives/{id} while the page shows it. The rule is
// the dead letters' bulk actions': a delete, or an action on more than
// confirmOver tasks, first shows how many match and a sample (the job's
// dry run) and waits for its confirm. When the job ends its outcome stays
// in the flash and the page is read again.
import { api, h, clear, flash, errorText, field, shortId, badge } from './lib.js';

const confirmOver = 100;
const actions = [['task.cancel', 'Cancel'], ['task.run_now', 'Run now'], ['task.delete', 'Delete'], ['task.reprioritize', 'Change priority']];

// selection is the job's selection of the list's filter q (the API's
// names), or null when the list filters by what a job cannot select by
// (error_contains, idempotency_key: the reason is said instead).
export function taskSelection(q) {
  if (q.get('error_contains') || q.get('idempotency_key')) return null;
  const req = {};
  for (const k of ['queue', 'kind', 'where']) if (q.get(k)) req[k] = q.get(k);
  if (q.get('state')) req.states = [q.get('state')];
  const attr = q.get('attr');
  if (attr && attr.indexOf('=') > 0) req.attributes = { [attr.slice(0, attr.indexOf('='))]: attr.slice(attr.indexOf('=') + 1) };
  if (q.get('created_since')) req.since = q.get('created_since');
  if (q.get('created_until')) req.until = q.get('created_until');
  // No filter means every task the action changes, which the API wants said.
  if (Object.keys(req).length === 0) req.all = true;
  return req;
}

// taskActionsSection: list is the element holding the rows' checkboxes
// (input.pick, #pick-all); onDone reads the page again.
export function taskActionsSection(list, q, onDone) {
  const sel = taskSelection(q);
  const action = h('select', { id: 'ta-action', name: 'action' }, actions.map(([v, l]) => h('option', { value: v }, l)));
  const priority = h('input', { id: 'ta-priority', name: 'priority', type: 'number', min: '-32768', max: '32767', step: '1', size: 6, disabled: true });
  const reason = h('input', { id: 'ta-reason', name: 'reason', autocomplete: 'off', size: 36 });
  const count = h('span', { id: 'ta-count', role: 'status', 'aria-live': 'polite' }, '0 selected');
  const picked = h('button', { type: 'button', id: 'ta-picked', disabled: true }, 'Apply to the selected');
  const all = h('button', { type: 'button', id: 'ta-all', disabled: !sel }, 'Apply to all matching this filter');
  const preview = h('div', { id: 'ta-preview', class: 'preview', 'aria-live': 'polite', hidden: true });
  const confirmBtn = h('button', { type: 'button', class: 'danger', id: 'ta-confirm', hidden: true });
  const cancelBtn = h('button', { type: 'button', id: 'ta-cancel-preview', hidden: true }, 'Cancel');
  const bar = h('progress', { id: 'ta-progress', max: '1', value: '0', hidden: true, 'aria-label': 'Done of the selection' });
  const text = h('span', { id: 'ta-text', role: 'status', 'aria-live': 'polite' });
  const stop = h('button', { type: 'button', id: 'ta-stop', hidden: true }, 'Stop');
  const err = h('p', { class: 'error', role: 'alert', id: 'ta-error' });
  const ids = () => [...list.querySelectorAll('input.pick:checked')].map((c) => c.dataset.id);
  const label = () => actions.find(([v]) => v === action.value)[1].toLowerCase();
  let pending = null; // the request a shown preview waits to confirm
  let job = null;
  const hidePreview = () => {
    preview.hidden = confirmBtn.hidden = cancelBtn.hidden = true;
    pending = null;
  };
  const update = () => {
    const n = ids().length;
    clear(count, `${n} selected`);
    picked.disabled = n === 0 || !!job;
    all.disabled = !sel || !!job;
    clear(picked, n ? `${actions.find(([v]) => v === action.value)[1]} the ${n} selected` : 'Apply to the selected');
  };
  list.addEventListener('change', (ev) => {
    if (ev.target.id === 'pick-all') for (const c of list.querySelectorAll('input.pick')) c.checked = ev.target.checked;
    if (ev.target.classList.contains('pick') || ev.target.id === 'pick-all') update();
  });
  action.addEventListener('change', () => {
    priority.disabled = action.value !== 'task.reprioritize';
    hidePreview();
    update();
  });
  // request is the job's body for the picked rows or the filter, or null
  // (said in err) when what it needs is missing.
  const request = (byIDs) => {
    clear(err);
    const r = { action: action.value, ...(byIDs ? { ids: ids() } : sel) };
    if (reason.value.trim()) r.reason = reason.value.trim();
    if (action.value === 'task.delete' && !r.reason) {
      clear(err, 'Give the reason for deleting them.');
      reason.focus();
      return null;
    }
    if (action.value === 'task.reprioritize') {
      if (priority.value === '') {
        clear(err, 'Give the new priority.');
        priority.focus();
        return null;
      }
      r.priority = Number(priority.value);
    }
    return r;
  };
  const ask = async (byIDs) => {
    const r = request(byIDs);
    if (!r) return;
    hidePreview();
    try {
      const p = (await api('POST', '/v1/tasks/bulk', { ...r, dry_run: true, sample: 5 })).preview;
      if (action.value !== 'task.delete' && p.matched <= confirmOver) {
        run(r);
        return;
      }
      clear(preview, h('p', { class: 'stat', id: 'ta-matched', dataset: { matched: String(p.matched) } },
        h('span', { class: 'n' }, String(p.matched)), ` would be changed (${label()}); a sample:`),
      h('ul', { class: 'samples' }, (p.sample || []).map((x) => h('li', { class: 'sample', dataset: { id: x.id } },
        shortId(x.id, `#/tasks/${encodeURIComponent(x.id)}`), ' ', x.queue, ' ', x.kind, ' ', badge(x.state)))));
      clear(confirmBtn, `Confirm: ${label()} these ${p.matched}`);
      preview.hidden = false;
      confirmBtn.hidden = p.matched === 0;
      cancelBtn.hidden = false;
      pending = r;
      confirmBtn.focus();
    } catch (e) {
      clear(err, errorText(e));
    }
  };
  const show = (st) => {
    bar.hidden = false;
    bar.max = String(Math.max(st.total, 1));
    bar.value = String(st.replayed + st.failed);
    clear(text, `${st.replayed} changed, ${st.failed} skipped of ${st.total} (${st.status})`);
  };
  const run = async (r) => {
    hidePreview();
    try {
      job = await api('POST', '/v1/tasks/bulk', { ...r, wait: '10s' });
      update();
      stop.hidden = false;
      show(job);
      while (job.status === 'running' && list.isConnected) {
        await new Promise((res) => setTimeout(res, 500));
        job = await api('GET', `/v1/redrives/${encodeURIComponent(job.redrive_id)}`);
        show(job);
      }
      const msg = `${label()}: ${job.replayed} changed, ${job.failed} skipped (${job.status})`;
      job = null;
      flash(msg);
      onDone();
    } catch (e) {
      clear(err, errorText(e));
      job = null;
      update();
    }
    stop.hidden = true;
  };
  picked.addEventListener('click', () => ask(true));
  all.addEventListener('click', () => ask(false));
  confirmBtn.addEventListener('click', () => { if (pending) run(pending); });
  cancelBtn.addEventListener('click', hidePreview);
  stop.addEventListener('click', async () => {
    if (!job) return;
    try {
      job = await api('POST', `/v1/redrives/${encodeURIComponent(job.redrive_id)}/cancel`);
    } catch (e) {
      clear(err, errorText(e));
    }
  });
  return h('section', { class: 'card selection', id: 'task-actions', 'aria-label': 'Task actions' },
    field('Action', action), field('Priority', priority), field('Reason (required to delete), recorded on each', reason),
    count, picked, all,
    sel ? null : h('p', { class: 'muted small', id: 'ta-all-why' }, 'A bulk action selects by queue, kind, state, attribute, creation time and where, not by error or idempotency key.'),
    preview, confirmBtn, cancelBtn, bar, text, stop, err);
}
