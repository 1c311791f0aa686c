// The SharedWorker behind livestream.js: one live connection to the event
// log for every console tab of this browser (HTTP/1.1 allows six
// connections per host, so a stream per tab froze the seventh). It
// forwards each tick of that connection to every connected tab; the
// connection opens with the first tab and closes when the last says bye.
import { follow } from './streamsource.js';

const ports = new Set();
let stop = null;

self.onconnect = (ev) => {
  const port = ev.ports[0];
  ports.add(port);
  port.onmessage = (m) => {
    if (m.data === 'hello') {
      // A tab back from the back/forward cache.
      ports.add(port);
      start();
      return;
    }
    if (m.data !== 'bye') return;
    ports.delete(port);
    if (ports.size === 0 && stop) {
      stop();
      stop = null;
    }
  };
  port.start();
  start();
};

function start() {
  if (stop) return;
  stop = follow(() => {
    for (const p of ports) p.postMessage('tick');
  });
}
