// The console's entry: session, sign-in and the hash router.
import { api, h, clear, flash, clearFlash, errorText, getSession, setSession, whenSignedOut, stopLive, showLive, endCursor, booted } from './lib.js';
import { overviewPage } from './overview.js';
import { queuePage } from './queue.js';
import { dlqListPage, dlqPage } from './dlq.js';
import { tasksPage, taskPage } from './tasks.js';
import { workersPage, workerPage } from './workers.js';
import { eventsPage } from './events.js';
import { runsPage, runPage } from './runs.js';
import { orderingPage } from './ordering.js';
import { redrivesPage, redrivePage } from './redrives.js';
import { auditPage } from './audit.js';
import { limitsPage } from './limits.js';
import { schedulesPage } from './schedules.js';

const main = document.getElementById('main');

// routes: hash path → page. Each page renders into main and may start one
// live stream (lib.live), closed when the page changes.
const routes = [
  [/^\/$/, 'overview', (view) => overviewPage(view)],
  [/^\/queues\/([^/]+)$/, 'overview', (view, m) => queuePage(view, decodeURIComponent(m[1]))],
  [/^\/dlq$/, 'dlq', (view, m, q) => dlqListPage(view, q)],
  [/^\/dlq\/([^/]+)$/, 'dlq', (view, m) => dlqPage(view, decodeURIComponent(m[1]))],
  [/^\/tasks$/, 'tasks', (view, m, q) => tasksPage(view, q)],
  [/^\/tasks\/([^/]+)$/, 'tasks', (view, m) => taskPage(view, decodeURIComponent(m[1]))],
  [/^\/workers$/, 'workers', (view, m, q) => workersPage(view, q)],
  [/^\/workers\/([^/]+)$/, 'workers', (view, m, q) => workerPage(view, decodeURIComponent(m[1]), q)],
  [/^\/events$/, 'events', (view, m, q) => eventsPage(view, q)],
  [/^\/runs$/, 'runs', (view, m, q) => runsPage(view, q)],
  [/^\/runs\/([^/]+)$/, 'runs', (view, m, q) => runPage(view, decodeURIComponent(m[1]), q)],
  [/^\/ordering$/, 'ordering', (view, m, q) => orderingPage(view, q)],
  [/^\/redrives$/, 'redrives', (view, m, q) => redrivesPage(view, q)],
  [/^\/redrives\/([^/]+)$/, 'redrives', (view, m, q) => redrivePage(view, decodeURIComponent(m[1]), q)],
  [/^\/audit$/, 'audit', (view, m, q) => auditPage(view, q)],
  [/^\/limits$/, 'limits', (view) => limitsPage(view)],
  [/^\/schedules$/, 'schedules', (view) => schedulesPage(view)],
];

// Each page renders into a view of its own, shown once it is ready and
// only if no later navigation replaced it (a slow page never overwrites
// the next one).
let generation = 0;

async function route() {
  stopLive();
  const gen = ++generation;
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, qs] = raw.split('?');
  const q = new URLSearchParams(qs || '');
  if (!getSession()) return;
  clearFlash(); // but a message set for this navigation (flashNext)
  for (const [re, name, fn] of routes) {
    const m = path.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    clear(main, h('p', { class: 'muted' }, 'Loading…'));
    const view = h('div', { class: 'view' });
    // The page's live stream starts where the log ends now, before the
    // page reads its data (lib.live).
    view._end = await endCursor();
    try {
      await fn(view, m, q);
    } catch (e) {
      clear(view, h('h1', {}, 'Something went wrong'), h('p', { class: 'error', role: 'alert' }, errorText(e)));
    }
    if (gen === generation) {
      clear(main, view);
      showLive(view);
    }
    return;
  }
  clear(main, h('h1', {}, 'Not found'), h('p', {}, 'No such page. '), h('a', { href: '#/' }, 'Back to the overview'));
}

function signedIn(s) {
  setSession(s);
  document.getElementById('nav').hidden = false;
  const who = document.getElementById('who');
  clear(who, s.dev ? 'dev mode (anonymous admin)' : `${s.name} · ${s.role}`);
  who.dataset.role = s.role;
  document.getElementById('signout').hidden = !!s.dev;
  route();
}

function signInForm(message) {
  setSession(null);
  stopLive();
  document.getElementById('nav').hidden = true;
  document.getElementById('signout').hidden = true;
  clear(document.getElementById('who'));
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true,
    placeholder: 'bst_…', spellcheck: 'false' });
  const err = h('p', { class: 'error', role: 'alert', id: 'signin-error' }, message || '');
  // method post: were the script's handler ever skipped, the token still
  // never lands in the address bar or the history.
  const form = h('form', { class: 'card signin', id: 'signin', method: 'post', action: '/console/session', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in'),
    h('p', {}, 'Paste a Backstop API token (backstop tokens create --name NAME --role viewer|operator|admin). ',
      'It is sent once; the server keeps a session cookie.'),
    h('div', { class: 'field' }, h('label', { for: 'token' }, 'API token'), input),
    err,
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const s = await api('POST', '/console/session', { token: input.value });
      input.value = '';
      signedIn(s);
    } catch (e) {
      clear(err, errorText(e));
      input.focus();
    }
  });
  clear(main, form);
  input.focus();
}

whenSignedOut(() => signInForm('Your session ended: sign in again.'));

document.getElementById('signout').addEventListener('click', async () => {
  try {
    await api('POST', '/console/session/signout');
  } catch (e) {
    flash(errorText(e), 'error');
    return;
  }
  signInForm('Signed out.');
});

window.addEventListener('hashchange', route);

(async () => {
  try {
    signedIn(await booted('/console/session'));
  } catch (e) {
    signInForm(e.status === 401 ? '' : errorText(e));
  }
})();
