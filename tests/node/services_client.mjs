#!/usr/bin/env node
// Real-client check: drive a kernel gateway with @jupyterlab/services (the library
// JupyterLab itself uses) from Node.
//
// Usage:  node services_client.mjs [BASE_URL] [TOKEN]
//   BASE_URL  default $KGW_URL      (e.g. http://127.0.0.1:8888)
//   TOKEN     default $KGW_TOKEN
//   $KGW_WS_URL overrides the websocket base (default: BASE_URL with http -> ws)
//   $KGW_CLIENT_TIMEOUT_MS overrides the global timeout (default 60000)
//   $KGW_WS_PROTOCOL  auto   (default) offer v1.kernel.websocket.jupyter.org like JupyterLab does and
//                            accept whatever the server picks (library falls back to legacy JSON)
//                     legacy offer no subprotocol: legacy JSON text frames with a "channel" key
//                     v1     like auto, but fail unless the server selected the v1 binary protocol
//
// Exits 0 only if every check passed; prints "FAIL: ..." and exits 1 otherwise,
// 2 on the global timeout. Never waits forever.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const WS = require('ws');
const {
  ServerConnection,
  KernelManager,
  KernelAPI,
  KernelSpecAPI
} = require('@jupyterlab/services');

const baseUrl = process.argv[2] || process.env.KGW_URL;
const token = process.argv[3] ?? process.env.KGW_TOKEN ?? '';
if (!baseUrl) {
  console.error('usage: node services_client.mjs BASE_URL [TOKEN]  (or $KGW_URL/$KGW_TOKEN)');
  process.exit(64);
}
const wsUrl = process.env.KGW_WS_URL || 'ws' + baseUrl.replace(/\/+$/, '').slice(4);
const GLOBAL_TIMEOUT_MS = Number(process.env.KGW_CLIENT_TIMEOUT_MS || 60000);
const WS_PROTOCOL = (process.env.KGW_WS_PROTOCOL || 'auto').toLowerCase();
if (!['auto', 'legacy', 'v1'].includes(WS_PROTOCOL)) {
  console.error(`bad KGW_WS_PROTOCOL ${JSON.stringify(WS_PROTOCOL)} (auto|legacy|v1)`);
  process.exit(64);
}

// In legacy mode, drop the subprotocol list the library offers, as an old client would.
class LegacyWebSocket extends WS {
  constructor(url, _protocols, options) {
    super(url, [], options);
  }
}
const WebSocket = WS_PROTOCOL === 'legacy' ? LegacyWebSocket : WS;

const settings = ServerConnection.makeSettings({
  baseUrl,
  wsUrl,
  token,
  appendToken: true,
  WebSocket,
  fetch
});

let step = 'init';
let kernel = null;
let manager = null;
let passed = 0;

function log(...args) {
  console.log(`[services_client +${((Date.now() - t0) / 1000).toFixed(2)}s]`, ...args);
}
const t0 = Date.now();

class CheckError extends Error {}
function check(cond, what, detail) {
  if (!cond) {
    throw new CheckError(`${what}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
  }
  passed += 1;
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CheckError(`timed out after ${ms} ms: ${what}`)), ms);
    })
  ]).finally(() => clearTimeout(timer));
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

async function cleanup() {
  // Best effort: never leave a kernel running behind us.
  try {
    if (kernel && !kernel.isDisposed) {
      await withTimeout(KernelAPI.shutdownKernel(kernel.id, settings), 5000, 'cleanup shutdown');
    }
  } catch (e) {
    /* already gone or server unreachable */
  }
  try {
    manager?.dispose();
  } catch (e) {
    /* ignore */
  }
}

const globalTimer = setTimeout(async () => {
  console.error(`FAIL: global timeout (${GLOBAL_TIMEOUT_MS} ms) during step "${step}"`);
  await Promise.race([cleanup(), sleep(3000)]);
  process.exit(2);
}, GLOBAL_TIMEOUT_MS);

/** Run one execute request; collect iopub messages; answer stdin via onStdin. */
async function execute(code, { stdinReply, timeoutMs = 15000, onIOPub, allowStdin = false } = {}) {
  const future = kernel.requestExecute({ code, allow_stdin: allowStdin || !!stdinReply, stop_on_error: true });
  const out = { stdout: '', stderr: '', iopub: [], stdin: [], reply: null };
  future.onIOPub = msg => {
    out.iopub.push(msg);
    if (msg.header.msg_type === 'stream') {
      out[msg.content.name] += msg.content.text;
    }
    if (onIOPub) onIOPub(msg, future);
  };
  future.onStdin = msg => {
    out.stdin.push(msg);
    if (msg.header.msg_type === 'input_request' && stdinReply !== undefined) {
      kernel.sendInputReply({ status: 'ok', value: stdinReply }, msg.header);
    }
  };
  out.reply = await withTimeout(future.done, timeoutMs, `execute_reply for ${JSON.stringify(code)}`);
  return out;
}

function waitForStatus(wanted, timeoutMs, what) {
  if (kernel.status === wanted) return Promise.resolve();
  return withTimeout(
    new Promise(resolve => {
      const cb = (_, status) => {
        if (status === wanted) {
          kernel.statusChanged.disconnect(cb);
          resolve();
        }
      };
      kernel.statusChanged.connect(cb);
    }),
    timeoutMs,
    what
  );
}

async function main() {
  log(`base ${baseUrl} ws ${wsUrl} protocol mode ${WS_PROTOCOL}`);

  step = 'kernelspecs';
  const specs = await withTimeout(KernelSpecAPI.getSpecs(settings), 10000, 'GET /api/kernelspecs');
  check(specs && typeof specs.kernelspecs === 'object', 'kernelspecs model', specs);
  check('python3' in specs.kernelspecs, 'python3 kernelspec listed', Object.keys(specs.kernelspecs));
  check(typeof specs.default === 'string' && specs.default in specs.kernelspecs, 'default kernelspec is listed', specs.default);
  check(specs.kernelspecs.python3.language === 'python', 'python3 spec language', specs.kernelspecs.python3);
  check(Array.isArray(specs.kernelspecs.python3.argv), 'python3 spec argv', specs.kernelspecs.python3);
  log('kernelspecs ok:', Object.keys(specs.kernelspecs).join(','));

  step = 'start kernel';
  manager = new KernelManager({ serverSettings: settings });
  await withTimeout(manager.ready, 10000, 'KernelManager.ready');
  kernel = await withTimeout(manager.startNew({ name: 'python3' }), 20000, 'KernelManager.startNew');
  check(typeof kernel.id === 'string' && kernel.id.length > 0, 'kernel id', kernel.id);
  check(kernel.name === 'python3', 'kernel name', kernel.name);
  log('started kernel', kernel.id);

  step = 'list running';
  const running = await withTimeout(KernelAPI.listRunning(settings), 10000, 'GET /api/kernels');
  check(running.some(m => m.id === kernel.id), 'new kernel in GET /api/kernels', running.map(m => m.id));
  const model = await withTimeout(KernelAPI.getKernelModel(kernel.id, settings), 10000, 'GET /api/kernels/{id}');
  check(model && model.id === kernel.id && model.name === 'python3', 'GET /api/kernels/{id} model', model);

  step = 'connect';
  const info = await withTimeout(kernel.info, 20000, 'kernel_info_reply over the websocket');
  check(info.status === 'ok', 'kernel_info_reply status', info);
  check(info.language_info && info.language_info.name === 'python', 'kernel_info language', info.language_info);
  check(kernel.connectionStatus === 'connected', 'connection status', kernel.connectionStatus);
  const negotiated = kernel._ws?.protocol ?? '';
  log('connected; kernel protocol_version', info.protocol_version, '; websocket subprotocol', JSON.stringify(negotiated));
  if (WS_PROTOCOL === 'legacy') {
    check(negotiated === '', 'no subprotocol selected when none offered', negotiated);
  } else if (WS_PROTOCOL === 'v1') {
    check(negotiated === 'v1.kernel.websocket.jupyter.org', 'server selected the v1 protocol', negotiated);
  }

  step = 'execute print(6*7)';
  let r = await execute('print(6*7)');
  check(r.reply.content.status === 'ok', 'execute_reply status ok', r.reply.content);
  check(r.reply.header.msg_type === 'execute_reply', 'execute_reply msg_type', r.reply.header);
  check(r.stdout === '42\n', 'stdout of print(6*7)', r.stdout);
  const types = r.iopub.map(m => m.header.msg_type);
  check(types.includes('execute_input'), 'execute_input seen on iopub', types);
  check(types.includes('status'), 'status seen on iopub', types);
  log('execute ok; iopub:', types.join(','));

  step = 'stdin';
  r = await execute('x = input("q")\nprint("got:" + x)', { stdinReply: 'kgw-stdin-value' });
  check(r.stdin.length === 1 && r.stdin[0].header.msg_type === 'input_request', 'one input_request', r.stdin.map(m => m.header.msg_type));
  check(r.stdin[0].content.prompt === 'q', 'input_request prompt', r.stdin[0].content);
  check(r.reply.content.status === 'ok', 'execute_reply status after input', r.reply.content);
  check(r.stdout === 'got:kgw-stdin-value\n', 'input value came back', r.stdout);
  r = await execute('x');
  const er = r.iopub.find(m => m.header.msg_type === 'execute_result');
  check(er && er.content.data['text/plain'] === "'kgw-stdin-value'", 'x holds the input value', er && er.content);
  log('stdin ok');

  step = 'display_data';
  r = await execute('from IPython.display import display\ndisplay({"text/plain": "shown", "text/html": "<b>shown</b>"}, raw=True)');
  const dd = r.iopub.find(m => m.header.msg_type === 'display_data');
  check(r.reply.content.status === 'ok', 'display execute ok', r.reply.content);
  check(dd && dd.content.data['text/plain'] === 'shown' && dd.content.data['text/html'] === '<b>shown</b>', 'display_data bundle', dd && dd.content);
  log('display_data ok');

  step = 'comm (kernel -> frontend)';
  const fromKernel = [];
  let gotOpen = null;
  kernel.registerCommTarget('kgw_test_target', (comm, msg) => {
    gotOpen = msg.content.data;
    comm.onMsg = m => fromKernel.push(m.content.data);
  });
  r = await execute(
    'from ipykernel.comm import Comm\n' +
    '_c = Comm(target_name="kgw_test_target", data={"hello": 1})\n' +
    '_c.send({"n": 2})\n'
  );
  check(r.reply.content.status === 'ok', 'comm-open execute ok', r.reply.content);
  for (let i = 0; i < 50 && fromKernel.length < 1; i++) await sleep(50);
  check(gotOpen && gotOpen.hello === 1, 'comm_open data reached frontend target', gotOpen);
  check(fromKernel.length === 1 && fromKernel[0].n === 2, 'comm_msg from kernel', fromKernel);

  step = 'comm (frontend -> kernel echo)';
  r = await execute(
    'def _kgw_target(comm, open_msg):\n' +
    '    comm.send({"opened": open_msg["content"]["data"]})\n' +
    '    @comm.on_msg\n' +
    '    def _recv(msg):\n' +
    '        comm.send({"echo": msg["content"]["data"]})\n' +
    'get_ipython().kernel.comm_manager.register_target("kgw_echo", _kgw_target)\n'
  );
  check(r.reply.content.status === 'ok', 'register comm target', r.reply.content);
  const echoes = [];
  const comm = kernel.createComm('kgw_echo');
  comm.onMsg = m => echoes.push(m.content.data);
  await withTimeout(comm.open({ from: 'node' }).done, 10000, 'comm_open processed');
  await withTimeout(comm.send({ v: 5 }).done, 10000, 'comm_msg processed');
  for (let i = 0; i < 50 && echoes.length < 2; i++) await sleep(50);
  check(echoes.length === 2, 'two comm messages back', echoes);
  check(echoes[0].opened && echoes[0].opened.from === 'node', 'comm open data echoed', echoes[0]);
  check(echoes[1].echo && echoes[1].echo.v === 5, 'comm message echoed', echoes[1]);
  comm.close();
  log('comms ok');

  step = 'interrupt';
  let sawInput = null;
  const sawInputP = new Promise(res => (sawInput = res));
  const t1 = Date.now();
  const pending = execute('import time\ntime.sleep(30)\nprint("not interrupted")', {
    timeoutMs: 20000,
    onIOPub: msg => {
      if (msg.header.msg_type === 'execute_input') sawInput();
    }
  });
  await withTimeout(sawInputP, 10000, 'execute_input for the sleep cell');
  await sleep(300); // let the kernel actually enter time.sleep
  await withTimeout(kernel.interrupt(), 10000, 'POST /api/kernels/{id}/interrupt');
  r = await pending;
  const elapsed = Date.now() - t1;
  check(r.reply.content.status === 'error', 'interrupted cell replies with error', r.reply.content);
  check(r.reply.content.ename === 'KeyboardInterrupt', 'interrupted with KeyboardInterrupt', r.reply.content.ename);
  check(elapsed < 15000, 'interrupt was quick', elapsed);
  check(!r.stdout.includes('not interrupted'), 'sleep cell did not complete', r.stdout);
  const errMsg = r.iopub.find(m => m.header.msg_type === 'error');
  check(errMsg && errMsg.content.ename === 'KeyboardInterrupt', 'error message on iopub', errMsg && errMsg.content);
  await waitForStatus('idle', 10000, 'idle after interrupt');
  // ipykernel (stop_on_error) aborts shell requests that reach it before it has finished
  // unwinding the error; a fast client can land in that window. Retry only that case.
  for (let attempt = 0; attempt < 5; attempt++) {
    r = await execute('print("after-interrupt")');
    if (r.reply.content.status !== 'aborted') break;
    await sleep(100);
  }
  check(r.reply.content.status === 'ok' && r.stdout === 'after-interrupt\n', 'execute after interrupt', r);
  log(`interrupt ok (${elapsed} ms)`);

  step = 'restart';
  const statuses = [];
  const statusCb = (_, s) => statuses.push(s);
  kernel.statusChanged.connect(statusCb);
  await withTimeout(kernel.restart(), 30000, 'restart');
  // After restart the connection re-requests kernel_info; wait for idle.
  await waitForStatus('idle', 20000, 'idle after restart');
  kernel.statusChanged.disconnect(statusCb);
  check(statuses.includes('restarting'), 'restarting status observed', statuses);
  check(kernel.connectionStatus === 'connected', 'connected after restart', kernel.connectionStatus);
  r = await execute('print(6*7)');
  check(r.reply.content.status === 'ok' && r.stdout === '42\n', 'execute after restart', r.reply.content);
  r = await execute('x');
  check(r.reply.content.status === 'error' && r.reply.content.ename === 'NameError', 'state cleared by restart (x undefined)', r.reply.content);
  log('restart ok; statuses:', statuses.join(','));

  step = 'shutdown';
  const kid = kernel.id;
  await withTimeout(kernel.shutdown(), 15000, 'shutdown');
  check(kernel.status === 'dead', 'status dead after shutdown', kernel.status);
  const after = await withTimeout(KernelAPI.listRunning(settings), 10000, 'GET /api/kernels after shutdown');
  check(!after.some(m => m.id === kid), 'kernel gone from GET /api/kernels', after.map(m => m.id));
  const gone = await withTimeout(KernelAPI.getKernelModel(kid, settings), 10000, 'GET deleted kernel');
  check(gone === undefined, 'GET /api/kernels/{id} after shutdown is 404', gone);
  kernel = null;
  log('shutdown ok');
}

let code = 0;
try {
  await main();
  console.log(`PASS: all ${passed} checks passed`);
} catch (e) {
  code = 1;
  const detail = e instanceof CheckError ? e.message : (e && e.stack) || String(e);
  console.error(`FAIL during step "${step}" (after ${passed} passing checks): ${detail}`);
}
await Promise.race([cleanup(), sleep(5000)]);
clearTimeout(globalTimer);
process.exit(code);
