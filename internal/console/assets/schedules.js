// Schedules: the periodic schedules (docs/api.md, "Periodic schedules")
// with their next tick and last run (its outcome and task), and pause and
// resume for operators. Rereads every 5 s while shown.
import { api, h, clear, badge, fmtTime, flash, errorText, can, fmtClockSeconds } from './lib.js';

const timeCell = (s, none) => (s ? h('time', { datetime: s }, fmtTime(s)) : none);

function scheduleRow(s, rerender) {
  const act = async (what) => {
    try {
      await api('POST', `/v1/schedules/${encodeURIComponent(s.name)}/${what}`);
      flash(`Schedule ${s.name} ${what === 'pause' ? 'paused' : 'resumed'}.`);
      await rerender();
    } catch (e) {
      flash(errorText(e), 'error');
    }
  };
  const button = !can('operator') ? null : s.paused
    ? h('button', { type: 'button', class: 'resume', onclick: () => act('resume'), 'aria-label': `Resume ${s.name}` }, 'Resume')
    : h('button', { type: 'button', class: 'pause', onclick: () => act('pause'), 'aria-label': `Pause ${s.name}` }, 'Pause');
  const last = s.last_run_at
    ? [timeCell(s.last_run_at), ' ', s.last_outcome ? badge(s.last_outcome, s.last_outcome === 'enqueued' ? 'succeeded' : 'warn') : null,
      s.last_task_id ? [' ', h('a', { href: `#/tasks/${encodeURIComponent(s.last_task_id)}`, class: 'mono task' }, s.last_task_id)] : null]
    : 'never';
  const cells = [
    [s.name, 'name'],
    [h('span', { class: 'mono' }, s.schedule), 'schedule'],
    [[h('a', { href: `#/tasks?${new URLSearchParams({ queue: s.queue, kind: s.kind })}` }, `${s.queue} · ${s.kind}`)], 'task'],
    [s.paused ? badge('paused') : timeCell(s.next_run_at, '—'), 'next'],
    [last, 'last'],
    [s.missed, 'missed'],
    [button, 'actions'],
  ];
  return h('tr', { dataset: { name: s.name, paused: String(!!s.paused) } }, cells.map(([c, cls], i) =>
    i === 0 ? h('th', { scope: 'row', class: cls }, c) : h('td', { class: cls }, c)));
}

export async function schedulesPage(main) {
  const here = location.hash;
  const render = async () => {
    const { items } = await api('GET', '/v1/schedules');
    const list = items.length === 0
      ? h('p', { class: 'muted', id: 'schedules-none' }, 'No schedules. Add one with backstop periodic add NAME (--every D | --cron EXPR) --queue Q --kind K.')
      : h('table', {},
        h('caption', { class: 'sr-only' }, 'Schedules'),
        h('thead', {}, h('tr', {}, ['Name', 'Schedule', 'Enqueues', 'Next run', 'Last run', 'Missed ticks', ''].map((x) => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, items.map((s) => scheduleRow(s, render))));
    clear(main,
      h('h1', {}, 'Schedules'),
      h('p', { class: 'muted' }, 'Periodic tasks: the maintenance leader enqueues one task per tick. A paused schedule skips its ticks; ',
        'resumed, it ticks again from the next tick after now.'),
      h('div', { class: 'scroll', id: 'schedules' }, list),
      h('p', { class: 'muted small' }, 'Updated ', fmtClockSeconds(), ' · rereads every 5 s'));
  };
  await render();
  const tick = () => setTimeout(async () => {
    if (location.hash !== here || !main.isConnected) return; // another page, or this one opened again
    try { await render(); } catch { /* the next tick tries again */ }
    tick();
  }, 5000);
  tick();
}
