// The relays (GET /v1/relay, docs/brokers.md): each sink's outbox
// messages — undelivered, how long the oldest has waited, dead letters
// linked to the DLQ, the newest error — each event-log checkpoint's lag,
// and each ingester's lag behind its broker. Shown on the overview; only what the server read, never computed.
import { api, h, fmtAge, table, fmtClockSeconds } from './lib.js';

// relayStatus reads GET /v1/relay; null when it cannot be read (the
// overview shows the rest).
export async function relayStatus() {
  try {
    return await api('GET', '/v1/relay');
  } catch {
    return null;
  }
}

const secs = (s) => (s > 0 ? fmtAge(s * 1000) || '0s' : '0s');

// sinksSection is the overview's Sinks section; empty when no sink has a
// message, no checkpoint exists and no ingester reported.
export function sinksSection(st) {
  const ingesters = (st && st.ingesters) || [];
  if (!st || (!st.sinks.length && !st.checkpoints.length && !ingesters.length)) return '';
  const sinkRows = st.sinks.map((s) => {
    const dlq = `#/dlq?queue=${encodeURIComponent(s.queue)}&status=open`;
    const row = [
      h('a', { href: `#/tasks?queue=${encodeURIComponent(s.queue)}` }, s.sink),
      h('span', { class: 'pending' }, String(s.pending)),
      h('span', { class: 'lag' }, secs(s.lag_seconds)),
      h('a', { class: 'dead', href: dlq, 'aria-label': `Dead messages of sink ${s.sink}: ${s.dead}` }, String(s.dead)),
      h('span', { class: 'error', title: s.last_error || '' }, s.last_error || '—'),
    ];
    row.attrs = { 'data-sink': s.sink };
    return row;
  });
  const cpRows = st.checkpoints.map((c) => {
    const row = [c.name, c.stream, c.sink, `${c.events_behind}${c.events_behind_capped ? '+' : ''}`, secs(c.lag_seconds),
      h('span', { class: 'error', title: c.last_error || '' }, c.last_error || '—')];
    row.attrs = { 'data-checkpoint': `${c.name}/${c.stream}` };
    return row;
  });
  return h('section', { id: 'sinks', 'aria-labelledby': 'sinks-title' },
    h('h2', { id: 'sinks-title' }, 'Sinks'),
    h('div', { class: 'scroll' }, table('Sinks with their undelivered messages, lag and dead letters',
      ['Sink', 'Pending (messages behind)', 'Lag', 'Dead (DLQ)', 'Last error'], sinkRows, 'No outbox message yet.')),
    st.checkpoints.length ? h('div', { class: 'scroll' }, table('Event-log relay checkpoints with their lag',
      ['Checkpoint', 'Stream', 'Sink', 'Events behind', 'Lag', 'Last error'], cpRows, '')) : '',
    ingesters.length ? h('div', { class: 'scroll' }, table('Ingesters with their lag behind the broker',
      ['Topic', 'Group', 'Queue', 'Messages behind', 'Lag', 'Reported', 'Last error'], ingesters.map((i) => {
        const row = [i.topic, i.group, h('a', { href: `#/tasks?queue=${encodeURIComponent(i.queue)}` }, i.queue),
          h('span', { class: 'behind' }, String(i.lag_messages)), h('span', { class: 'lag' }, secs(i.lag_seconds)),
          fmtClockSeconds(i.updated_at),
          h('span', { class: 'error', title: i.last_error || '' }, i.last_error || '—')];
        row.attrs = { 'data-ingest': `${i.group}/${i.topic}` };
        return row;
      }), '')) : '');
}
