// A TLS-terminating reverse proxy for tests: serves https on 127.0.0.1:PORT with CERT/KEY (PEM
// files) and forwards every request to TARGET (an http:// base URL), so a peer that insists on
// https (an OAuth server fetching a Client ID Metadata Document) can reach a loopback Gatehouse.
import https from 'node:https';
import http from 'node:http';
import fs from 'node:fs';

const target = new URL(process.env.TARGET);
const server = https.createServer(
  { cert: fs.readFileSync(process.env.CERT), key: fs.readFileSync(process.env.KEY) },
  (req, res) => {
    const upstream = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => { res.writeHead(502); res.end(); });
    req.pipe(upstream);
  },
);
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('tls proxy ready'));
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
