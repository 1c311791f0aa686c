// Runs: the tasks that share a run_id attribute, summarised by the server
// (GET /v1/runs/{id}): progress (tasks total, done, failed, dead), the
// reported steps, and the run's tasks (GET /v1/runs/{id}/tasks, paged).
// When the run is a workflow's (issue 16), its workflow, state and steps
// are shown too.
import { api, h, clear, fmtTime, badge, table, field, live, debounce, can, errorText, shortId, copyButton, pretty, flash } from './lib.js';
import { stepGraph } from './graph.js';

const states = ['scheduled', 'pending', 'buffered', 'running', 'succeeded', 'dead', 'canceled'];

export async function runsPage(main, q) {
  const input = h('input', { id: 'run-id', name: 'run_id', required: true, spellcheck: 'false', autocomplete: 'off' });
  const form = h('form', { class: 'filters', id: 'run-find', role: 'search', 'aria-label': 'Open a run by its id' },
    field('Run id (the run_id attribute)', input), h('button', { type: 'submit' }, 'Open run'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (input.value.trim()) location.hash = `#/runs/${encodeURIComponent(input.value.trim())}`;
  });
  // The latest workflow runs (GET /v1/runs, newest first), paged.
  const lq = new URLSearchParams({ limit: '50' });
  for (const k of ['workflow', 'state', 'before']) if (q.get(k)) lq.set(k, q.get(k));
  let list;
  try {
    const page = await api('GET', `/v1/runs?${lq}`);
    const rows = page.runs.map((r) => [
      h('a', { href: `#/runs/${encodeURIComponent(r.run_id)}`, class: 'mono' }, r.run_id),
      r.workflow, `v${r.version}`, badge(r.state), fmtTime(r.created_at), fmtTime(r.updated_at)]);
    const nq = new URLSearchParams(q);
    if (page.next_cursor) nq.set('before', page.next_cursor);
    list = [h('div', { class: 'scroll', id: 'runs-list' },
      table('Workflow runs, newest first', ['Run', 'Workflow', 'Version', 'State', 'Started', 'Last change'], rows, 'No workflow run yet.')),
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      q.get('before') ? h('a', { href: '#/runs' }, 'Newest') : null,
      page.next_cursor ? h('a', { href: `#/runs?${nq}`, rel: 'next' }, 'Older runs') : null)];
  } catch (e) {
    list = h('p', { class: 'error', role: 'alert' }, String(e.message || e));
  }
  // Filter the list by workflow and state (the halted runs of a workflow:
  // state failed).
  const wfIn = h('input', { id: 'runs-f-workflow', name: 'workflow', value: q.get('workflow') || '', spellcheck: 'false', autocomplete: 'off' });
  const stIn = h('select', { id: 'runs-f-state', name: 'state' },
    ['', 'running', 'failed', 'compensating', 'compensated', 'compensation_failed', 'succeeded', 'partial', 'canceling', 'canceled'].map((s) =>
      h('option', { value: s, selected: (q.get('state') || '') === s }, s || 'any')));
  const filter = h('form', { class: 'filters', id: 'runs-filter', role: 'search', 'aria-label': 'Filter workflow runs' },
    field('Workflow', wfIn), field('State', stIn), h('button', { type: 'submit' }, 'Filter'));
  filter.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const fq = new URLSearchParams();
    if (wfIn.value.trim()) fq.set('workflow', wfIn.value.trim());
    if (stIn.value) fq.set('state', stIn.value);
    location.hash = `#/runs?${fq}`;
  });
  const wf = q.get('workflow');
  const halted = (q.get('state') || '').split(',').some((s) => s === 'failed' || s === 'compensation_failed');
  const resume = wf && halted && can('admin') ? await resumeSection(wf, q.get('state')) : null;
  clear(main, h('h1', {}, 'Runs'),
    h('p', { class: 'muted' }, 'A run is the tasks enqueued with the same run_id attribute; a workflow run also has a state and steps.'), form,
    h('section', { 'aria-labelledby': 'runs-title' }, h('h2', { id: 'runs-title' }, 'Workflow runs'), filter, resume, list));
  live(main, 'type.run.finished', debounce(() => { if (location.hash.startsWith('#/runs') && !location.hash.startsWith('#/runs/')) runsPage(main, q).catch(() => {}); }, 1000));
}

// resumeSection resumes the halted runs of a workflow with one redrive of
// its dead steps (POST /v1/dlq/redrive {workflow}: the command line's
// `dlq redrive --workflow W`); each is replayed under its own id and its run
// is running again at once. The dry run says how many dead steps that is.
async function resumeSection(wf, state) {
  let runs;
  try {
    runs = await api('GET', `/v1/runs?${new URLSearchParams({ workflow: wf, state, limit: '1000' })}`);
  } catch (e) {
    return h('section', { class: 'card bulk', id: 'runs-resume' }, h('p', { class: 'error', role: 'alert', id: 'runs-resume-error' }, errorText(e)));
  }
  const n = `${runs.runs.length}${runs.next_cursor ? '+' : ''}`;
  return redriveSteps({ workflow: wf }, 'runs-resume', 'Resume halted runs', `Resume ${n} halted runs of ${wf}`,
    (steps) => `replays the workflow's ${steps} open dead steps, each under its own id; their runs go on at once`);
}

// redriveSteps: a section that replays the open dead steps sel selects
// (POST /v1/dlq/redrive with workflow or run_id), the dry run's count of
// them first, an optional reason, the progress polled until done; onDone
// runs when it is.
async function redriveSteps(sel, prefix, label, button, intro, onDone) {
  const err = h('p', { class: 'error', role: 'alert', id: `${prefix}-error` });
  const sec = h('section', { class: 'card bulk', id: prefix, 'aria-label': label });
  let pre;
  try {
    pre = await api('POST', '/v1/dlq/redrive', { ...sel, dry_run: true });
  } catch (e) {
    clear(err, errorText(e));
    sec.append(err);
    return sec;
  }
  const steps = pre.preview ? pre.preview.matched : pre.total;
  sec.dataset.steps = String(steps);
  const why = h('input', { id: `${prefix}-why`, name: 'why', autocomplete: 'off', size: 32 });
  const start = h('button', { type: 'button', class: 'primary', id: `${prefix}-start`, disabled: steps === 0 }, button);
  const text = h('span', { id: `${prefix}-text`, role: 'status', 'aria-live': 'polite' }, intro(steps));
  const show = (st) => {
    sec.dataset.status = st.status;
    clear(text, `${st.replayed} of ${st.total} dead steps replayed${st.failed ? `, ${st.failed} failed` : ''} · ${st.status}`);
  };
  start.addEventListener('click', async () => {
    start.disabled = true;
    clear(err);
    const req = { ...sel };
    if (why.value.trim()) req.why = why.value.trim();
    try {
      let st = await api('POST', '/v1/dlq/redrive', req);
      show(st);
      while (st.status === 'running' && sec.isConnected) {
        await new Promise((r) => setTimeout(r, 500));
        st = await api('GET', `/v1/redrives/${encodeURIComponent(st.redrive_id)}`);
        show(st);
      }
      if (onDone) onDone(st);
    } catch (e) {
      clear(err, errorText(e));
      start.disabled = false;
    }
  });
  sec.append(field('Why (recorded with each replay)', why), start, text, err);
  return sec;
}

// Run states: those a cancel applies to, those halted on a dead step
// (resumable), and those in which a step still waiting will never run.
const cancelable = ['running', 'failed', 'compensating', 'compensation_failed'];
const halted = ['failed', 'compensation_failed'];
const over = ['succeeded', 'partial', 'compensated', 'canceled'];
const unwinding = ['compensating', 'compensation_failed', 'canceling'];

// shownState: a step's state as the run page says it: a waiting step of a
// run that is over (or unwinding, for a step that is no compensation)
// was never run and never will be.
function shownState(run, s) {
  const st = String(s.state || 'waiting');
  if (st !== 'waiting') return st;
  if (over.includes(run.state) || (unwinding.includes(run.state) && !s.compensation)) return 'not run';
  return st;
}

// stepResult: a step's result (masked by the server as every payload is),
// collapsed, with a copy button; a result too large for the run's answer
// says its size.
function stepResult(s) {
  if (s.result !== undefined && s.result !== null) {
    const text = pretty(s.result);
    const pre = h('pre', { class: 'json' }, text);
    return h('details', { class: 'json-block result', dataset: { step: s.id } },
      h('summary', {}, text.length > 40 ? `${text.replace(/\s+/g, ' ').slice(0, 40)}…` : text.replace(/\s+/g, ' '), ' ',
        copyButton(() => pre.textContent, `Copy the result of step ${s.id}`)), pre);
  }
  // Left out of the run's answer past 1 KiB (a null result is just null).
  if (s.result === undefined && s.result_bytes > 1024) {
    return h('span', { class: 'muted small' }, `${s.result_bytes} bytes (read it from the next steps' payloads)`);
  }
  return '—';
}

export async function runPage(main, id, q) {
  const aq = new URLSearchParams({ limit: '50' });
  if (q.get('after')) aq.set('after', q.get('after'));
  const [run, page] = await Promise.all([
    api('GET', `/v1/runs/${encodeURIComponent(id)}`),
    api('GET', `/v1/runs/${encodeURIComponent(id)}/tasks?${aq}`),
  ]);
  const c = run.counts || {};
  const done = c.succeeded || 0;
  const dead = c.dead || 0;
  const canceled = c.canceled || 0;
  const waiting = (c.scheduled || 0) + (c.pending || 0) + (c.buffered || 0) + (c.running || 0);
  const failed = page.items.filter((t) => t.attempt > 1 || t.last_error).length;
  const rows = page.items.map((t) => [
    shortId(t.id, `#/tasks/${encodeURIComponent(t.id)}`),
    t.queue, t.kind, badge(t.state), `${t.attempt}/${t.max_attempts}`, fmtTime(t.created_at), h('span', { class: 'err', title: t.last_error || '' }, t.last_error),
  ]);
  const nq = new URLSearchParams(q);
  if (page.next_cursor) nq.set('after', page.next_cursor);
  const steps = Array.isArray(run.steps) ? run.steps.map((s) => ({ ...s, state: shownState(run, s) })) : null;
  // A workflow run's progress counts its steps (compensations apart): a
  // step is done once it succeeded or was skipped. Other runs count tasks.
  const work = steps ? steps.filter((s) => !s.compensation) : null;
  const total = work ? work.length : run.total;
  const finished = work ? work.filter((s) => s.state === 'succeeded' || s.state === 'skipped').length : done;
  const unit = work ? 'steps' : 'tasks';
  const isHalted = halted.includes(run.state);
  const actions = run.workflow ? await runActions(main, id, q, run) : null;
  clear(main,
    h('p', {}, h('a', { href: '#/runs' }, '← Runs')),
    h('h1', {}, 'Run ', h('span', { class: 'mono' }, run.run_id), ' ', copyButton(run.run_id, 'Copy the run id')),
    h('section', { 'aria-label': 'Progress', id: 'run-progress', 'data-total': String(run.total), 'data-done': String(done), 'data-dead': String(dead),
      'data-steps-total': work ? String(total) : null, 'data-steps-done': work ? String(finished) : null },
      h('p', {}, h('progress', { max: String(Math.max(total, 1)), value: String(finished), 'aria-label': `${finished} of ${total} ${unit} done` }),
        ' ', h('span', { id: 'run-progress-text' }, `${finished} of ${total} ${unit} done`), run.finished ? ' · finished'
          : isHalted ? ' · halted: waits for its dead step to be replayed'
            : run.state === 'canceling' ? ' · canceling: its running steps are asked to stop' : ' · in progress'),
      actions,
      h('dl', { class: 'facts' },
        run.workflow ? [h('dt', {}, 'Workflow'), h('dd', { id: 'run-workflow' }, String(run.workflow))] : null,
        run.state ? [h('dt', {}, 'State'), h('dd', { id: 'run-state' }, badge(String(run.state)))] : null,
        run.error ? [h('dt', {}, 'Error'), h('dd', { class: 'err', id: 'run-error' }, run.error)] : null,
        h('dt', {}, 'Tasks'), h('dd', {}, String(run.total)),
        h('dt', {}, 'Done'), h('dd', {}, String(done)),
        h('dt', {}, 'Waiting or running'), h('dd', {}, String(waiting)),
        h('dt', {}, 'Failed (an attempt failed, this page)'), h('dd', {}, String(failed)),
        h('dt', {}, 'Dead'), h('dd', {}, `${dead} (${run.dead_letters} open dead letters)`),
        h('dt', {}, 'Canceled'), h('dd', {}, String(canceled)),
        h('dt', {}, 'Steps reported'), h('dd', {}, run.progress && run.progress.total_steps
          ? `${run.progress.completed_steps || 0} of ${run.progress.total_steps}` : '—'),
        h('dt', {}, 'Counts by state'), h('dd', {}, states.filter((s) => c[s]).map((s) => `${s} ${c[s]}`).join(', ') || '—'),
        h('dt', {}, 'First activity'), h('dd', {}, fmtTime(run.first_activity)),
        h('dt', {}, 'Last activity'), h('dd', {}, fmtTime(run.last_activity)))),
    steps ? h('section', { 'aria-labelledby': 'steps-title' }, h('h2', { id: 'steps-title' }, 'Steps'),
      h('div', { class: 'scroll' }, stepGraph({ ...run, steps })),
      h('div', { class: 'scroll', id: 'run-steps' }, table(`Steps of run ${run.run_id}`, ['Step', 'State', 'Task', 'Result'],
        steps.map((s) => [String(s.id ?? ''), badge(s.state, s.state === 'not run' ? 'not-run' : s.state),
          s.task_id ? shortId(s.task_id, `#/tasks/${encodeURIComponent(s.task_id)}`) : '—', stepResult(s)]),
        'No step yet.'))) : null,
    h('section', { 'aria-labelledby': 'run-tasks-title' }, h('h2', { id: 'run-tasks-title' }, 'Tasks'),
      h('div', { class: 'scroll', id: 'run-tasks' },
        table(`Tasks of run ${run.run_id}`, ['Id', 'Queue', 'Kind', 'State', 'Attempts', 'Created', 'Last error'], rows, 'No task.', 'list')),
      h('nav', { class: 'pager', 'aria-label': 'Pages' },
        q.get('after') ? h('a', { href: `#/runs/${encodeURIComponent(id)}` }, 'First page') : null,
        page.next_cursor ? h('a', { href: `#/runs/${encodeURIComponent(id)}?${nq}`, rel: 'next' }, 'Next page') : null)));
  // A re-render would drop a reason being typed or a resume under way.
  const busy = () => [...main.querySelectorAll('#run-actions input')].some((x) => x.value)
    || main.querySelector('#run-resume[data-status="running"]');
  const refresh = debounce(() => {
    if (!location.hash.startsWith(`#/runs/${encodeURIComponent(id)}`) || !main.isConnected) return;
    if (busy()) {
      refresh();
      return;
    }
    runPage(main, id, q).catch(() => {});
  }, 1000);
  live(main, `run.${id}`, refresh);
}

// runActions: an operator cancels the run (POST /v1/runs/{id}/cancel: its
// waiting steps at once, its running ones asked to stop, compensations
// run); an admin resumes a halted run by replaying its dead steps
// (POST /v1/dlq/redrive {run_id}). A refusal (409: a run whose
// compensation failed cannot be canceled) is said beside the button.
async function runActions(main, id, q, run) {
  const err = h('p', { class: 'error', role: 'alert', id: 'run-cancel-error' });
  const cancel = can('operator') && cancelable.includes(run.state)
    ? h('button', { type: 'button', class: 'danger', id: 'run-cancel' }, 'Cancel run') : null;
  if (cancel) {
    cancel.addEventListener('click', async () => {
      cancel.disabled = true;
      clear(err);
      try {
        const r = await api('POST', `/v1/runs/${encodeURIComponent(id)}/cancel`);
        flash(`Run ${id} is ${r.state}.`);
        await runPage(main, id, q);
      } catch (e) {
        clear(err, errorText(e));
        cancel.disabled = false;
      }
    });
  }
  const resume = can('admin') && halted.includes(run.state)
    ? await redriveSteps({ run_id: id }, 'run-resume', 'Resume this run', 'Resume this run',
      (n) => `replays its ${n} open dead steps, each under its own id; the run goes on at once`,
      () => runPage(main, id, q).catch(() => {}))
    : null;
  const force = can('admin') && !over.includes(run.state) ? forceStep(main, id, q, run) : null;
  if (!cancel && !resume && !force) return null;
  return h('div', { class: 'run-actions', id: 'run-actions' }, cancel ? h('p', {}, cancel) : null, err, resume, force);
}

// forceable: the step rows an admin may force to succeeded (dead: failed
// or canceled; stuck: pending), as [step, item, state]; the server says
// why when one cannot be (409).
function forceable(run) {
  const out = [];
  for (const s of run.steps || []) {
    const rows = Array.isArray(s.items) && s.items.length ? s.items : [{ item: 0, state: s.state }];
    for (const r of rows) {
      if (['failed', 'canceled', 'pending'].includes(r.state)) out.push([String(s.id), r.item || 0, r.state, Array.isArray(s.items) && s.items.length > 0]);
    }
  }
  return out;
}

// forceStep: an admin settles a dead or stuck step as succeeded with a
// result and a reason (POST /v1/runs/{id}/steps/{step}/complete); the run
// goes on. Audited as step.force_completed.
function forceStep(main, id, q, run) {
  const rows = forceable(run);
  if (!rows.length) return null;
  const pick = h('select', { id: 'run-force-step' },
    rows.map(([step, item, state, fan]) => h('option', { value: `${item}:${step}` }, fan ? `${step} item ${item} (${state})` : `${step} (${state})`)));
  const result = h('input', { type: 'text', id: 'run-force-result', placeholder: 'null', spellcheck: 'false', autocomplete: 'off' });
  const reason = h('input', { type: 'text', id: 'run-force-reason', maxlength: '1024', autocomplete: 'off' });
  const go = h('button', { type: 'submit', class: 'danger', id: 'run-force-start' }, 'Complete step');
  const err = h('p', { class: 'error', role: 'alert', id: 'run-force-error' });
  const form = h('form', { class: 'filters', id: 'run-force', 'aria-label': 'Force a step to succeeded' },
    field('Step', pick), field('Result (JSON)', result), field('Why (required, recorded)', reason), go);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(err);
    const [item, ...rest] = pick.value.split(':');
    const step = rest.join(':');
    const body = { item: Number(item), reason: reason.value };
    if (result.value.trim()) {
      try {
        body.result = JSON.parse(result.value);
      } catch (e) {
        clear(err, `The result is not JSON: ${e.message}`);
        return;
      }
    }
    if (!reason.value.trim()) {
      clear(err, 'Say why the step is forced.');
      return;
    }
    go.disabled = true;
    try {
      const r = await api('POST', `/v1/runs/${encodeURIComponent(id)}/steps/${encodeURIComponent(step)}/complete`, body);
      flash(`Step ${step} of run ${id} completed by hand; the run is ${r.state}.`);
      result.value = '';
      reason.value = '';
      await runPage(main, id, q);
    } catch (e) {
      clear(err, errorText(e));
      go.disabled = false;
    }
  });
  return h('section', { class: 'card', id: 'run-force-section' },
    h('h2', {}, 'Complete a step by hand'),
    h('p', { class: 'muted small' }, 'Settles a dead or stuck step as succeeded with this result; a running task is asked to stop and its later result is ignored. The run goes on.'),
    form, err);
}
