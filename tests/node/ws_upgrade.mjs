// Opens each websocket described on stdin (a JSON list of {url, headers, protocols}) with the
// `ws` client and prints, as one JSON list, what the client reports for each: the HTTP status
// and body of a refused upgrade, or the selected subprotocol of an accepted one.
import WebSocket from 'ws';

function attempt({ url, headers = {}, protocols = [] }) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, protocols, { headers, handshakeTimeout: 10000 });
    ws.on('unexpected-response', (req, res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({
        status: res.statusCode,
        httpVersion: res.httpVersion,
        headers: res.headers,
        body,
      }));
      res.on('error', (e) => resolve({ status: res.statusCode, error: String(e) }));
    });
    ws.on('open', () => {
      resolve({ status: 101, protocol: ws.protocol });
      ws.close();
    });
    ws.on('error', (e) => resolve({ error: String(e.message || e) }));
  });
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', async () => {
  const out = [];
  for (const c of JSON.parse(input)) out.push(await attempt(c));
  process.stdout.write(JSON.stringify(out));
});
