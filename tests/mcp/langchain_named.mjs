// kgw's named MCP kernels driven by LangChain's JS MCP adapter (@langchain/mcp-adapters;
// tests/integration/test_mcp_named.py runs it): node langchain_named.mjs BASE_URL API_KEY.
// Each tool call goes through a MultiServerMCPClient of its own, closed after it (a new MCP
// session per call, as LangChain's Python adapter and LlamaIndex's BasicMCPClient make them);
// the Kgw-Kernel-Name header keeps the kernel. Prints one "ok <check>" line per check passed.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { MultiServerMCPClient } from '@langchain/mcp-adapters';

const [base, key] = process.argv.slice(2);
const LONG = 180000; // a loaded machine: the kernel start is slow, not wrong

function ok(name) {
  console.log(`ok ${name}`);
}

function newClient(headers, extra = {}) {
  return new MultiServerMCPClient({
    mcpServers: {
      kgw: {
        transport: 'http',
        url: `${base}/mcp`,
        headers: { Authorization: `Bearer ${key}`, ...headers },
        automaticSSEFallback: false,
        defaultToolTimeout: LONG,
      },
    },
    ...extra,
  });
}

const text = (out) => (typeof out === 'string' ? out
  : out.map((c) => (typeof c === 'string' ? c : c.text ?? '')).join(''));

// A tool's text; the adapter throws a tool result with isError (e.g. a NameError): its message.
async function call(tool, args, config) {
  try {
    return text(await tool.invoke(args, config));
  } catch (e) {
    if (e?.name !== 'ToolException')
      throw e;
    return String(e.message);
  }
}

// One call in a client of its own: its text.
async function perCall(name, code) {
  const client = newClient(name ? { 'Kgw-Kernel-Name': name } : {});
  try {
    const tools = await client.getTools();
    const exec = tools.find((t) => t.name === 'execute_code');
    assert.ok(exec, `execute_code in ${tools.map((t) => t.name)}`);
    return await call(exec, { code });
  } finally {
    await client.close();
  }
}

async function main() {
  const name = `lc-${randomUUID().slice(0, 8)}`;
  let out = await perCall(name, 'x = 41');
  assert.match(out, new RegExp(`a new kernel named '${name}' was started`));
  out = await perCall(name, 'print(x + 1)');
  assert.match(out, /^42\n/, out);
  ok('state_across_clients');

  out = await perCall(`${name}-other`, 'print(x)');
  assert.match(out, /NameError/, out);
  ok('names_apart');
  out = await perCall(null, 'print(x)');
  assert.match(out, /NameError/, out);
  ok('no_name_apart');

  // one client, the name chosen per call by a hook (e.g. from the LangGraph thread): the
  // adapter opens a session with those headers for each call
  const client = newClient({}, {
    beforeToolCall: (_call, _state, config) =>
      ({ headers: { Authorization: `Bearer ${key}`,
                    'Kgw-Kernel-Name': config.configurable.thread } }),
  });
  try {
    const exec = (await client.getTools()).find((t) => t.name === 'execute_code');
    await exec.invoke({ code: 'v = "one"' }, { configurable: { thread: `${name}-t1` } });
    await exec.invoke({ code: 'v = "two"' }, { configurable: { thread: `${name}-t2` } });
    out = await call(exec, { code: 'print(v)' }, { configurable: { thread: `${name}-t1` } });
    assert.match(out, /^one\n/, out);
    out = await call(exec, { code: 'print(v)' }, { configurable: { thread: `${name}-t2` } });
    assert.match(out, /^two\n/, out);
    ok('name_per_call_hook');
  } finally {
    await client.close();
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
