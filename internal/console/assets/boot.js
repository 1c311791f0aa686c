// The first reads of a full load, sent while the modules arrive instead of
// after them: the session (who is signed in) and the end of the event log
// (where the first page's live stream starts, read before the page reads
// its data, as lib.endCursor is). app.js takes each once (lib.booted); a
// classic script, run as soon as it is parsed, so nothing waits for it.
window.backstopBoot = (() => {
  const get = (path) => fetch(path, { credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'application/json' } });
  return { '/console/session': get('/console/session'), '/v1/events?after=end&limit=1': get('/v1/events?after=end&limit=1') };
})();
