// kgw's /mcp driven by the official MCP TypeScript SDK client (tests/integration/test_mcp.py
// runs it): node mcp_client.mjs BASE_URL API_KEY. Prints one "ok <check>" line per check passed
// and exits 0; any failure throws (exit 1) with what was seen.
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

const [base, key] = process.argv.slice(2);
const LONG = { timeout: 180000 }; // a loaded machine: the kernel start is slow, not wrong

function ok(name) {
  console.log(`ok ${name}`);
}

async function connect(apiKey = key) {
  const transport = new StreamableHTTPClientTransport(new URL(base + '/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
  });
  const client = new Client({ name: 'kgw-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

async function run(client, code, opts = {}) {
  return client.callTool({ name: 'execute_code', arguments: { code } }, undefined,
    { ...LONG, ...opts });
}

async function main() {
  const { client, transport } = await connect();
  assert.equal(transport.protocolVersion, LATEST_PROTOCOL_VERSION);
  assert.ok(transport.sessionId, 'the server gave a session id');
  ok('initialize');

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['execute_code', 'fork', 'list_files', 'read_file',
    'restart_kernel', 'rollback', 'run_command', 'write_file']);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object');
    assert.equal(t.outputSchema?.type, 'object', `${t.name} has an output schema`);
  }
  ok('list_tools');

  // arguments that do not match a tool's inputSchema: JSON-RPC -32602, naming the argument
  const refused = async (name, args, message) => {
    await assert.rejects(client.callTool({ name, arguments: args }, undefined, LONG),
      (e) => e.code === -32602 && e.message.includes(message), `${name} ${JSON.stringify(args)}`);
  };
  await refused('execute_code', { code: 42 }, 'argument "code" must be a string');
  await refused('execute_code', {}, 'argument "code" is required');
  await refused('execute_code', { code: '1', verbose: true }, 'argument "verbose" is unknown');
  await refused('read_file', { path: 7 }, 'argument "path" must be a string');
  await refused('read_file', {}, 'argument "path" is required');
  await refused('read_file', { path: 'a', offset: 1 }, 'argument "offset" is unknown');
  ok('arguments_refused');

  let res = await run(client, 'x = 21');
  assert.equal(res.isError, false);
  assert.equal(res.structuredContent.status, 'ok');
  res = await run(client, 'print(x * 2)');
  assert.equal(res.isError, false, JSON.stringify(res));
  assert.match(text(res), /^42\n/);
  const kernelId = res.structuredContent.kernel_id;
  assert.ok(kernelId);
  ok('state_persists');

  res = await run(client,
    'import matplotlib\nmatplotlib.use("module://matplotlib_inline.backend_inline")\n' +
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()');
  const img = res.content.find((c) => c.type === 'image');
  assert.ok(img, `an image in ${JSON.stringify(res).slice(0, 500)}`);
  assert.equal(img.mimeType, 'image/png');
  assert.equal(Buffer.from(img.data, 'base64').subarray(1, 4).toString(), 'PNG');
  ok('plot_image');

  res = await run(client, 'def f():\n    return 1 / 0\nf()');
  assert.equal(res.isError, true);
  assert.match(text(res), /ZeroDivisionError/);
  assert.match(text(res), /Traceback|line 2/);
  assert.equal(res.structuredContent.status, 'error');
  ok('exception_is_error');

  const seen = [];
  res = await run(client,
    'import time\nfor i in range(4):\n    print("tick", i, flush=True)\n    time.sleep(0.5)',
    { onprogress: (p) => seen.push(p) });
  assert.equal(res.isError, false);
  assert.ok(seen.length >= 4, `progress notifications: ${JSON.stringify(seen)}`);
  assert.match(seen.map((p) => p.message).join(''), /tick 0\n[^]*tick 3\n/);
  for (let i = 1; i < seen.length; i++)
    assert.ok(seen[i].progress > seen[i - 1].progress);
  assert.match(text(res), /tick 3/);
  ok('progress');

  const ac = new AbortController();
  let first;
  const started = new Promise((resolve) => { first = resolve; });
  const t0 = Date.now();
  const p = run(client,
    'import time\nn = 0\nwhile True:\n    n += 1\n    print(n, flush=True)\n    time.sleep(0.1)',
    { signal: ac.signal, onprogress: () => first() });
  await started;
  ac.abort('test cancels');
  await assert.rejects(p);
  // the loop stopped: n stays the same
  res = await run(client, 'import time\na = n\ntime.sleep(1)\nprint(n - a)');
  assert.equal(res.isError, false, JSON.stringify(res));
  assert.equal(text(res).split('\n')[0], '0');
  assert.ok(Date.now() - t0 < 60000);
  ok('cancel');

  const files = !process.env.KGW_MCP_NO_FILES; // (valgrind has no openat2())
  if (files) {
    res = await client.callTool({ name: 'write_file', arguments: { path: 'dir/secret.txt',
      content: 'first session' } }, undefined, LONG);
    assert.equal(res.isError, false);
    res = await client.callTool({ name: 'read_file', arguments: { path: 'dir/secret.txt' } },
      undefined, LONG);
    assert.equal(res.content[0].text, 'first session');
    res = await client.callTool({ name: 'list_files', arguments: {} }, undefined, LONG);
    assert.ok(res.structuredContent.files.some((f) => f.path === 'dir/secret.txt'));
    await run(client, 'open("bin.dat", "wb").write(bytes(range(256)))');
    res = await client.callTool({ name: 'read_file', arguments: { path: 'bin.dat' } },
      undefined, LONG);
    assert.equal(res.structuredContent.encoding, 'base64');
    assert.deepEqual([...Buffer.from(res.content[0].resource.blob, 'base64')],
      [...Array(256).keys()]);
    ok('files');
  }

  const two = await connect();
  assert.notEqual(two.transport.sessionId, transport.sessionId);
  res = await run(two.client, 'print(x)');
  assert.equal(res.isError, true);
  assert.match(text(res), /NameError/);
  if (files) {
    res = await two.client.callTool({ name: 'list_files', arguments: {} }, undefined, LONG);
    assert.ok(!res.structuredContent.files.some((f) => f.path.includes('secret')));
    res = await two.client.callTool({ name: 'read_file', arguments: { path: 'dir/secret.txt' } },
      undefined, LONG);
    assert.equal(res.isError, true);
    assert.match(text(res), /no such file/);
  }
  ok('sessions_isolated');

  res = await client.callTool({ name: 'restart_kernel', arguments: {} }, undefined, LONG);
  assert.equal(res.isError, false, JSON.stringify(res));
  res = await run(client, 'print(x)');
  assert.match(text(res), /NameError/);
  ok('restart_kernel');

  await assert.rejects(connect('wrong-key'), (e) => /401/.test(String(e?.code ?? '') + e));
  ok('wrong_key_401');

  const auth = { Authorization: `Bearer ${key}` };
  let r = await fetch(`${base}/api/kernels/${kernelId}`, { headers: auth });
  assert.equal(r.status, 200);
  await transport.terminateSession();
  for (let i = 0; i < 100; i++) {
    r = await fetch(`${base}/api/kernels/${kernelId}`, { headers: auth });
    if (r.status === 404)
      break;
    await new Promise((res2) => setTimeout(res2, 200));
  }
  assert.equal(r.status, 404, 'the session\'s kernel is gone');
  ok('session_end_shuts_kernel');

  await client.close();
  await two.transport.terminateSession();
  await two.client.close();
}

main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
