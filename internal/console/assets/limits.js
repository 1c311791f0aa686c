// Limits: every cluster-wide concurrency and rate limit (docs/limits.md)
// with its use — running tasks, a rate limit's tokens — and the tasks
// waiting on it, each count linked to the tasks list filtered to them
// (pending tasks of the limit's scope and budget); then the fair queues
// (docs/fairness.md), each with its attribute, weights and waiting tasks
// per value. Rereads every 2 s while shown.
import { api, h, clear, badge, table, fmtClockSeconds } from './lib.js';

// rateText: "50/s" (starts per second).
const rateText = (v) => `${v}/s`;
const tokensText = (n) => (n === undefined || n === null ? '—' : (Math.floor(n * 10) / 10).toFixed(1));

// waitingLink: the pending tasks of the limit's scope (of one budget: its
// per attribute's value) — those its full budget holds back.
function waitingLink(l, n, value) {
  if (!n) return '0';
  const q = new URLSearchParams({ queue: l.queue, state: 'pending' });
  if (l.kind) q.set('kind', l.kind);
  if (value !== undefined && l.per) q.set('attr', `${l.per}=${value}`);
  return h('a', { href: `#/tasks?${q}`, class: 'waiting', 'aria-label': `${n} tasks waiting on ${l.name}${value !== undefined ? ` ${l.per}=${value}` : ''}` }, String(n));
}

function limitRow(l) {
  const rate = l.type === 'rate';
  const cells = [
    [l.name, 'name'],
    [h('span', { class: 'mono' }, l.scope), 'scope'],
    [badge(l.type, 'limit-type'), 'type'],
    [rate ? `${rateText(l.value)}, burst ${l.burst}` : `${l.value} at once`, 'value'],
    [rate ? `${l.in_use} running · ${tokensText(l.tokens)} tokens`
      : l.per ? `${l.in_use} running (${l.value} per ${l.per})` : `${l.in_use} / ${l.value}`, 'use'],
    [waitingLink(l, l.waiting), 'waiting'],
  ];
  return h('tr', { dataset: { limit: l.name } }, cells.map(([c, cls], i) =>
    i === 0 ? h('th', { scope: 'row', class: cls }, c) : h('td', { class: cls }, c)));
}

// budgets: a per limit's budgets that have running or pending tasks.
function budgetsSection(l) {
  const rate = l.type === 'rate';
  const rows = (l.budgets || []).map((b) => [
    h('span', { class: 'mono' }, b.value === '' ? '(none)' : b.value),
    String(b.running),
    rate ? tokensText(b.tokens) : `${b.running} / ${l.value}`,
    String(b.pending),
    waitingLink(l, b.waiting, b.value),
  ]);
  return h('section', { 'aria-labelledby': `budgets-${l.name}`, class: 'budgets', dataset: { limit: l.name } },
    h('h3', { id: `budgets-${l.name}` }, `${l.name}: one budget per ${l.per}`),
    h('div', { class: 'scroll' }, table(`Budgets of ${l.name}`, [l.per, 'Running', rate ? 'Tokens' : 'In use', 'Pending', 'Waiting'], rows,
      `No ${l.per} has running or pending tasks.`)));
}

// fairSection: a fair queue (docs/fairness.md): the attribute its claims
// rotate across, the weights, and per value its pending tasks (those
// waiting their turn), linked to the tasks list filtered to them.
function fairSection(f) {
  const weights = Object.entries(f.weights || {}).sort(([a], [b]) => a.localeCompare(b)).map(([v, w]) => `${v}=${w}`).join(', ');
  const rows = (f.values || []).map((v) => {
    const q = new URLSearchParams({ queue: f.queue, state: 'pending', attr: `${f.by}=${v.value}` });
    return [
      h('span', { class: 'mono' }, v.value === '' ? '(none)' : v.value),
      String(v.weight),
      v.pending ? h('a', { href: `#/tasks?${q}`, class: 'waiting', 'aria-label': `${v.pending} tasks of ${f.by}=${v.value} waiting in ${f.queue}` }, String(v.pending)) : '0',
    ];
  });
  return h('section', { 'aria-labelledby': `fair-${f.queue}`, class: 'fair', dataset: { queue: f.queue } },
    h('h3', { id: `fair-${f.queue}` }, `${f.queue}: fair by ${f.by}`),
    h('p', { class: 'muted small weights' }, weights ? `Weights: ${weights}; any other value 1.` : 'Every value weighs 1.'),
    h('div', { class: 'scroll' }, table(`Waiting tasks of ${f.queue} by ${f.by}`, [f.by, 'Weight', 'Waiting'], rows,
      `No task of ${f.queue} is waiting.`)));
}

export async function limitsPage(main) {
  const here = location.hash;
  const render = async () => {
    const [{ items }, fair] = await Promise.all([api('GET', '/v1/limits'), api('GET', '/v1/fair-queues')]);
    const list = items.length === 0
      ? h('p', { class: 'muted', id: 'limits-none' }, 'No limits. Set one with backstop limits set NAME --queue Q (--concurrency N | --rate R).')
      : h('table', {},
        h('caption', { class: 'sr-only' }, 'Limits'),
        h('thead', {}, h('tr', {}, ['Name', 'Scope', 'Type', 'Limit', 'In use', 'Waiting'].map((x) => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, items.map(limitRow)));
    clear(main,
      h('h1', {}, 'Limits'),
      h('p', { class: 'muted' }, 'Cluster-wide limits, enforced when tasks are claimed: a concurrency limit caps the tasks running at once, ',
        'a rate limit the tasks starting per second (a bucket of burst tokens refilled at the rate). A waiting task is pending, ',
        'held back by a full budget, and is not charged an attempt.'),
      h('div', { class: 'scroll', id: 'limits' }, list),
      items.filter((l) => l.per).map(budgetsSection),
      h('h2', { id: 'fair-queues' }, 'Fair queues'),
      fair.items.length === 0
        ? h('p', { class: 'muted', id: 'fair-none' }, 'No fair queues. Make one with backstop queues fair Q --by ATTR.')
        : h('p', { class: 'muted' }, 'Claims in a fair queue rotate across the values of an attribute (weighted round robin within a priority), ',
          'so a value with many waiting tasks does not hold back one with a few.'),
      fair.items.map(fairSection),
      h('p', { class: 'muted small' }, 'Updated ', fmtClockSeconds(), ' · rereads every 2 s'));
  };
  await render();
  const tick = () => setTimeout(async () => {
    if (location.hash !== here || !main.isConnected) return; // another page, or this one opened again
    try { await render(); } catch { /* the next tick tries again */ }
    tick();
  }, 2000);
  tick();
}
