#!/usr/bin/env node
// A JupyterLab-style client across a rollback (docs/checkpoints.md): @jupyterlab/services'
// KernelConnection stays on its websocket while the kernel is rolled back through the REST
// API, sees the status sequence and the notice, and keeps working with the checkpoint's state.
//
// Usage:  node rollback_client.mjs BASE_URL TOKEN
// Exits 0 after "PASS", 1 on a failed check ("FAIL: ..."), 2 on the global timeout.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const WS = require('ws');
const { ServerConnection, KernelManager, KernelAPI } = require('@jupyterlab/services');

const [baseUrl, token] = [process.argv[2], process.argv[3] ?? ''];
if (!baseUrl) {
  console.error('usage: node rollback_client.mjs BASE_URL TOKEN');
  process.exit(64);
}
const settings = ServerConnection.makeSettings({
  baseUrl,
  wsUrl: 'ws' + baseUrl.replace(/\/+$/, '').slice(4),
  token,
  appendToken: true,
  WebSocket: WS,
  fetch
});

let kernel = null;
let step = 'init';
const sleep = ms => new Promise(r => setTimeout(r, ms));

function check(cond, what, detail) {
  if (!cond) throw new Error(`${what}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    })
  ]).finally(() => clearTimeout(timer));
}

async function rest(method, path, body) {
  const r = await fetch(baseUrl.replace(/\/+$/, '') + path, {
    method,
    headers: { Authorization: `token ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

async function execute(code) {
  const future = kernel.requestExecute({ code, stop_on_error: true });
  let stdout = '';
  future.onIOPub = msg => {
    if (msg.header.msg_type === 'stream' && msg.content.name === 'stdout') stdout += msg.content.text;
  };
  const reply = await withTimeout(future.done, 20000, `execute ${JSON.stringify(code)}`);
  return { stdout, reply };
}

const globalTimer = setTimeout(() => {
  console.error(`FAIL: global timeout during step "${step}"`);
  process.exit(2);
}, 90000);

let manager = null;
try {
  step = 'start';
  manager = new KernelManager({ serverSettings: settings });
  await withTimeout(manager.ready, 10000, 'KernelManager.ready');
  kernel = await withTimeout(manager.startNew({ name: 'python3' }), 30000, 'startNew');
  await withTimeout(kernel.info, 20000, 'kernel_info');
  const ws = kernel._ws;

  step = 'state before';
  let r = await execute("z = 'kept'");
  check(r.reply.content.status === 'ok', 'first execution', r.reply.content);
  const count = r.reply.content.execution_count;
  const cp = await rest('POST', `/api/kernels/${kernel.id}/checkpoints`, {});
  check(cp.status === 201, 'checkpoint', cp);
  r = await execute("z = 'lost'");
  check(r.reply.content.status === 'ok', 'second execution', r.reply.content);

  step = 'rollback';
  const statuses = [];
  const connection = [];
  const notices = [];
  kernel.statusChanged.connect((_, s) => statuses.push(s));
  kernel.connectionStatusChanged.connect((_, s) => connection.push(s));
  kernel.iopubMessage.connect((_, msg) => {
    if (msg.metadata && msg.metadata.kgw_rollback) notices.push(msg);
  });
  const rb = await rest('POST', `/api/kernels/${kernel.id}/rollback`, { checkpoint: cp.body.id });
  check(rb.status === 200, 'rollback', rb);
  for (let i = 0; i < 100 && notices.length < 3; i++) await sleep(50);
  check(notices.length === 3, 'the status sequence and notice arrived', notices.map(m => m.header.msg_type));
  check(statuses.includes('starting') && statuses[statuses.length - 1] === 'idle',
        'status went starting, then idle', statuses);
  check(!statuses.includes('restarting') && !statuses.includes('autorestarting'),
        'no restart the client would reconnect for', statuses);
  const note = notices.find(m => m.header.msg_type === 'stream');
  check(note && note.content.text.includes(cp.body.id), 'the notice names the checkpoint', note?.content);

  step = 'after';
  r = await execute('print(z)');
  check(r.reply.content.status === 'ok' && r.stdout === 'kept\n', 'the checkpoint state', r);
  check(r.reply.content.execution_count === count + 1, 'the count continues from the checkpoint',
        [count, r.reply.content.execution_count]);
  check(kernel._ws === ws && connection.length === 0, 'the same websocket throughout', connection);
  console.log('PASS: a @jupyterlab/services client kept its websocket across a rollback');
  clearTimeout(globalTimer);
  await KernelAPI.shutdownKernel(kernel.id, settings).catch(() => {});
  manager.dispose();
  process.exit(0);
} catch (e) {
  console.error(`FAIL (${step}): ${e.message}`);
  if (kernel) await KernelAPI.shutdownKernel(kernel.id, settings).catch(() => {});
  process.exit(1);
}
