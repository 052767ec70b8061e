// The real E2B SDKs from npm (package-lock.json) against kgw's E2B-compatible API, configured
// the way a user would: only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (a kgw key).
// Driven by tests/integration/test_e2b.py, which starts kgw and passes:
//   KGW_E2B_OTHER_KEY  a key of another tenant
// Prints one "ok <step>" line per step; any failure exits non-zero with the reason.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { Sandbox as CoreSandbox, FilesystemEventType } from 'e2b'
import { Sandbox as OldSandbox } from 'e2b-old'

const sbxUrl = process.env.E2B_SANDBOX_URL
const otherKey = process.env.KGW_E2B_OTHER_KEY
const step = (s) => console.log(`ok ${s}`)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function expectReject(p, check, what) {
  let err = null
  try {
    await p
  } catch (e) {
    err = e
  }
  assert.ok(err, `${what}: expected a refusal`)
  if (check) assert.match(String(err && (err.message || err)), check, what)
  return err
}

// The first result's chart of code that shows one figure (no error, one result).
async function chartOf(run, code) {
  const ex = await run(code)
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
  assert.equal(ex.results.length, 1, JSON.stringify(ex.results.map((r) => r.formats())))
  assert.ok(ex.results[0].png, 'the figure still comes as a PNG')
  assert.ok(ex.results[0].chart, 'a chart: ' + JSON.stringify(ex.results[0].formats()))
  return ex.results[0].chart
}

// (in a context of its own, whose kernel has the set-up too: the code's names stay out of
// the sandbox's default context)
async function chartsAndData(sbx) {
  const ctx = await sbx.createCodeContext()
  const run = (code) => sbx.runCode(code, { context: ctx })
  // a line chart over dates, with units in its labels
  let chart = await chartOf(run, `
import numpy as np
import matplotlib.pyplot as plt
import datetime
dates = [datetime.date(2023, 9, 1) + datetime.timedelta(days=i) for i in range(100)]
t = np.linspace(0, 2*np.pi, 100)
plt.figure(figsize=(10, 6))
plt.plot(dates, np.sin(t), label='sin(x)')
plt.plot(dates, np.cos(t), label='cos(x)')
plt.xlabel("Time (s)")
plt.ylabel("Amplitude (Hz)")
plt.title('Plot of sin(x) and cos(x)')
plt.show()
`)
  assert.equal(chart.type, 'line')
  assert.equal(chart.title, 'Plot of sin(x) and cos(x)')
  assert.deepEqual([chart.x_label, chart.y_label, chart.x_unit, chart.y_unit],
    ['Time (s)', 'Amplitude (Hz)', 's', 'Hz'])
  assert.deepEqual([chart.x_scale, chart.y_scale], ['datetime', 'linear'])
  assert.ok(chart.x_ticks.length > 0 && chart.x_ticks.every((t) => typeof t === 'string'))
  assert.ok(!Number.isNaN(new Date(chart.x_ticks[0]).getTime()), chart.x_ticks[0])
  assert.ok(chart.y_ticks.every((t) => typeof t === 'number'))
  assert.ok(chart.x_tick_labels.every((t) => typeof t === 'string'))
  assert.deepEqual(chart.elements.map((e) => [e.label, e.points.length]),
    [['sin(x)', 100], ['cos(x)', 100]])
  const [sin] = chart.elements
  assert.ok(sin.points.every(([px, py]) => typeof px === 'string' && typeof py === 'number'))
  assert.equal(new Date(sin.points[0][0]).getTime(), Date.UTC(2023, 8, 1))
  assert.equal(new Date(sin.points[99][0]).getTime(), Date.UTC(2023, 8, 1) + 99 * 86400e3)
  assert.ok(Math.abs(sin.points[25][1] - Math.sin((25 * 2 * Math.PI) / 99)) < 1e-9)
  assert.equal(chart.truncated, undefined)

  // a bar chart
  chart = await chartOf(run, `
import matplotlib.pyplot as plt
authors = ['Author A', 'Author B', 'Author C', 'Author D']
sales = [100, 200, 300, 400]
plt.figure(figsize=(10, 6))
plt.bar(authors, sales, label='Books Sold', color='blue')
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.tight_layout()
plt.show()
`)
  assert.equal(chart.type, 'bar')
  assert.equal(chart.title, 'Book Sales by Authors')
  assert.deepEqual([chart.x_label, chart.y_label, chart.x_unit, chart.y_unit],
    ['Authors', 'Number of Books Sold', null, null])
  assert.deepEqual(chart.elements.map((b) => [b.label, b.group, b.value]), [
    ['Author A', 'Books Sold', 100], ['Author B', 'Books Sold', 200],
    ['Author C', 'Books Sold', 300], ['Author D', 'Books Sold', 400]])

  // a pie
  chart = await chartOf(run, `
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 8))
ax.pie([90, 10], labels=["No", "No, in blue"], autopct='%1.1f%%', startangle=90)
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()
`)
  assert.equal(chart.type, 'pie')
  assert.equal(chart.title, 'Will I wake up early tomorrow?')
  assert.deepEqual(chart.elements, [{ label: 'No', angle: 324, radius: 1 },
    { label: 'No, in blue', angle: 36, radius: 1 }])

  // a box-and-whisker chart
  chart = await chartOf(run, `
import matplotlib.pyplot as plt
data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87],
        'Class C': [75, 82, 88, 79, 86]}
fig, ax = plt.subplots(figsize=(10, 6))
ax.set_title('Exam Scores Distribution')
ax.set_xlabel('Class')
ax.set_ylabel('Score')
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
plt.show()
`)
  assert.equal(chart.type, 'box_and_whisker')
  assert.deepEqual(chart.elements.map((b) => [b.label, b.min, b.first_quartile, b.median,
    b.third_quartile, b.max, b.outliers]), [['Class A', 78, 85, 88, 90, 92, []],
    ['Class B', 84, 84.75, 88, 90.5, 95, [76]], ['Class C', 75, 79, 82, 86, 88, []]])

  // a superchart: a line and a scatter side by side
  chart = await chartOf(run, `
import matplotlib.pyplot as plt
import numpy as np
x1 = np.linspace(0, 10, 100)
fig, axs = plt.subplots(1, 2, figsize=(10, 8))
fig.suptitle('Multiple Charts Example', fontsize=16)
axs[0].plot(x1, np.sin(x1), 'r')
axs[0].set_title('Sine Wave')
axs[0].grid(True)
axs[1].scatter(np.random.rand(5), np.random.rand(5), c='blue', label='Dataset 1')
axs[1].set_xlabel('X')
axs[1].set_ylabel('Y')
axs[1].set_title('Scatter Plot')
axs[1].grid(True)
plt.show()
`)
  assert.equal(chart.type, 'superchart')
  assert.equal(chart.title, 'Multiple Charts Example')
  const [line, scatter] = chart.elements
  assert.deepEqual([chart.elements.length, line.type, line.title, line.x_label, line.y_label],
    [2, 'line', 'Sine Wave', null, null])
  assert.deepEqual(line.elements.map((e) => e.points.length), [100])
  assert.deepEqual([scatter.type, scatter.title, scatter.x_label, scatter.y_label],
    ['scatter', 'Scatter Plot', 'X', 'Y'])
  assert.deepEqual(scatter.elements.map((e) => [e.label, e.points.length]), [['Dataset 1', 5]])

  // an unknown figure; a blank one gives no chart
  chart = await chartOf(run, `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0, 0), 1, color='blue', fill=False))
plt.title('Two Concentric Circles')
plt.show()
`)
  assert.deepEqual(chart, { type: 'unknown', title: 'Two Concentric Circles', elements: [] })
  let ex = await run('import matplotlib.pyplot as plt\nplt.subplots()\nplt.show()')
  assert.ok(ex.results.length >= 1 && ex.results.every((r) => r.chart === undefined))

  // a million points: sampled evenly, and said so
  chart = await chartOf(run, `
import matplotlib.pyplot as plt
import numpy as np
plt.plot(np.arange(1_000_000), np.arange(1_000_000) * 2.0, label='big')
plt.show()
`)
  assert.equal(chart.truncated, true)
  const big = chart.elements[0]
  assert.equal(big.total_points, 1_000_000)
  assert.equal(big.points.length, 10_000)
  assert.deepEqual([big.points[0], big.points[9999]], [[0, 0], [999_999, 1_999_998]])

  // a DataFrame's columns; a large one cut, and said so (extra['kgw/truncated'])
  ex = await run('import pandas as pd\npd.DataFrame({"a": [1, 2, 3], "b": ["x", None, "z"]})')
  assert.deepEqual(ex.results[0].data, { a: [1, 2, 3], b: ['x', null, 'z'] })
  assert.ok(ex.results[0].html, 'the HTML table too')
  assert.equal(ex.results[0].chart, undefined)
  assert.equal(ex.results[0].extra['kgw/truncated'], undefined)
  ex = await run('pd.DataFrame({"n": range(250_000)})')
  assert.equal(ex.results[0].data.n.length, 100_000)
  assert.deepEqual(ex.results[0].data.n.slice(0, 3), [0, 1, 2])
  assert.deepEqual(ex.results[0].extra['kgw/truncated'],
    { data: { rows: 100_000, total_rows: 250_000, columns: 1, total_columns: 1 } })
  // other values: no chart, no data
  ex = await run('[1, 2]')
  assert.deepEqual([ex.results[0].chart, ex.results[0].data], [undefined, undefined])
  await sbx.removeCodeContext(ctx)
}

async function main() {
  // ---- create (the current SDKs: POST /v2/sandboxes) ----
  const sbx = await Sandbox.create({
    secure: true, // (every kgw sandbox is: its envdAccessToken signs file URLs)
    timeoutMs: 600_000,
    envs: { GREETING: 'hi from envs' },
    metadata: { purpose: 'kgw-e2b-test' },
  })
  assert.match(sbx.sandboxId, /^[0-9a-f-]{36}$/)
  step('create')

  // ---- runCode: state kept, the main result ----
  let ex = await sbx.runCode('x = 41')
  assert.equal(ex.error, undefined)
  ex = await sbx.runCode('x + 1')
  assert.equal(ex.text, '42')
  ex = await sbx.runCode("'hello'")
  assert.equal(ex.text, 'hello') // a str as its text, as E2B shows it
  assert.equal(typeof ex.executionCount, 'number')
  step('runCode state')

  // ---- stdout streamed, stderr apart ----
  const seen = []
  ex = await sbx.runCode(
    'import sys, time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.5)\nprint("oops", file=sys.stderr, flush=True)',
    { onStdout: (m) => seen.push(m.line), onStderr: (m) => seen.push('ERR:' + m.line) },
  )
  // (the kernel may cut or join stream messages: the text is asserted, and that it came in
  // more than one piece, the sleeps apart)
  assert.equal(ex.logs.stdout.join(''), 'line 0\nline 1\nline 2\n')
  assert.deepEqual(ex.logs.stderr, ['oops\n'])
  assert.ok(ex.logs.stdout.length >= 2, JSON.stringify(ex.logs.stdout))
  assert.equal(seen.filter((l) => !l.startsWith('ERR:')).join(''), 'line 0\nline 1\nline 2\n')
  assert.equal(seen[seen.length - 1], 'ERR:oops\n')
  step('stdout streamed')

  // ---- envVars reach the kernel ----
  ex = await sbx.runCode('import os; os.environ["GREETING"]')
  assert.equal(ex.text, 'hi from envs')
  step('envs')

  // ---- an error with its traceback ----
  ex = await sbx.runCode('def f():\n    return 1 / 0\nf()')
  assert.equal(ex.error.name, 'ZeroDivisionError')
  assert.match(ex.error.value, /division by zero/)
  assert.match(ex.error.traceback, /ZeroDivisionError/)
  assert.match(ex.error.traceback.replace(/\x1b\[[0-9;]*m/g, ''), /in f\(\)/)
  step('error')

  // ---- rich results: a matplotlib PNG, HTML, an unknown MIME type in extra ----
  ex = await sbx.runCode(
    'import matplotlib\nmatplotlib.use("agg")\nimport matplotlib.pyplot as plt\n' +
      '%matplotlib inline\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()',
  )
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
  const png = ex.results.find((r) => r.png)
  assert.ok(png, 'a PNG result: ' + JSON.stringify(ex.results.map((r) => r.formats())))
  assert.ok(Buffer.from(png.png, 'base64').subarray(1, 4).toString() === 'PNG')
  ex = await sbx.runCode(
    'from IPython.display import display, HTML\n' +
      'display({"text/plain": "p", "application/x-kgw": "custom"}, raw=True)\nHTML("<b>b</b>")',
  )
  assert.equal(ex.results.length, 2)
  assert.equal(ex.results[0].extra['application/x-kgw'], 'custom')
  assert.equal(ex.results[0].isMainResult, false)
  assert.equal(ex.results[1].html, '<b>b</b>')
  assert.equal(ex.results[1].isMainResult, true)
  step('rich results')

  // ---- charts (e2b/chart) and dataframes (e2b/data), as E2B's own tests run them ----
  await chartsAndData(sbx)
  step('charts and dataframes')

  // ---- files: write, read, list; the kernel sees the same files at the same paths ----
  const info = await sbx.files.write('/home/user/data/hello.txt', 'hello e2b')
  assert.equal(info.path, '/home/user/data/hello.txt')
  assert.equal(await sbx.files.read('/home/user/data/hello.txt'), 'hello e2b')
  ex = await sbx.runCode('open("/home/user/data/hello.txt").read()')
  assert.equal(ex.text, 'hello e2b')
  await sbx.runCode('open("/home/user/data/from_kernel.txt", "w").write("written by code")')
  assert.equal(await sbx.files.read('data/from_kernel.txt'), 'written by code')
  const names = (await sbx.files.list('/home/user/data')).map((e) => `${e.name}:${e.type}`)
  assert.deepEqual(names.sort(), ['from_kernel.txt:file', 'hello.txt:file'])
  await sbx.files.write([
    { path: '/home/user/multi/a.txt', data: 'A' },
    { path: '/home/user/multi/b.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
  ])
  const b = await sbx.files.read('/home/user/multi/b.bin', { format: 'bytes' })
  assert.deepEqual([...b], [0, 1, 2, 255])
  assert.equal(await sbx.files.makeDir('/home/user/newdir/sub'), true)
  assert.equal(await sbx.files.makeDir('/home/user/newdir/sub'), false)
  assert.equal(await sbx.files.exists('/home/user/newdir/sub'), true)
  const st = await sbx.files.getInfo('/home/user/data/hello.txt')
  assert.equal(st.size, 9)
  assert.equal(st.type, 'file')
  await sbx.files.rename('/home/user/multi/a.txt', '/home/user/newdir/a.txt')
  assert.equal(await sbx.files.read('/home/user/newdir/a.txt'), 'A')
  await sbx.files.remove('/home/user/newdir')
  assert.equal(await sbx.files.exists('/home/user/newdir'), false)
  await expectReject(sbx.files.read('/home/user/missing.txt'), /not found/i, 'missing file')
  await expectReject(sbx.files.read('/etc/passwd'), /home\/user/, 'outside the workspace')
  await expectReject(sbx.files.list('/etc'), /home\/user/, 'list outside the workspace')
  // what is not there is removed already (envd answers so)
  await sbx.files.remove('/home/user/never/there.txt')
  // one workspace path: the kernel works in /home/user, so paths code computes are the SDK's
  ex = await sbx.runCode('import os; os.getcwd()')
  assert.equal(ex.text, '/home/user')
  ex = await sbx.runCode('os.path.abspath("computed.txt")')
  await sbx.runCode('open("computed.txt", "w").write("by path")')
  assert.equal(await sbx.files.read(ex.text), 'by path')
  // ListDir below depth 1: by name, each directory's entries right after it (envd's walk)
  await sbx.files.write([{ path: '/home/user/tree/b/y.txt', data: 'y' },
    { path: '/home/user/tree/a/x.txt', data: 'x' }, { path: '/home/user/tree/c.txt', data: 'c' }])
  const walked = (await sbx.files.list('/home/user/tree', { depth: 2 })).map((e) => e.path)
  assert.deepEqual(walked, ['/home/user/tree/a', '/home/user/tree/a/x.txt', '/home/user/tree/b',
    '/home/user/tree/b/y.txt', '/home/user/tree/c.txt'])
  await sbx.runCode('os.symlink("a/x.txt", "tree/link")')
  const link = await sbx.files.getInfo('/home/user/tree/link')
  assert.equal(link.symlinkTarget, '/home/user/tree/a/x.txt')
  assert.equal(link.type, 'symlink')
  assert.equal(link.permissions, 'Lrwxrwxrwx')
  step('files')

  // ---- file metadata: envd's EntryInfo fields, as the SDK types them ----
  await sbx.runCode('import os\nos.makedirs("/home/user/meta/d", exist_ok=True)\n' +
    'open("/home/user/meta/f.txt", "w").write("12345")\nos.chmod("/home/user/meta/f.txt", 0o640)\n' +
    'os.chmod("/home/user/meta/d", 0o1777)\nopen("/home/user/meta/s", "w").close()\n' +
    'os.chmod("/home/user/meta/s", 0o4755)')
  ex = await sbx.runCode('os.stat("/home/user/meta/f.txt").st_mtime_ns // 1000000')
  const fi = await sbx.files.getInfo('/home/user/meta/f.txt')
  assert.deepEqual({ ...fi, modifiedTime: undefined }, {
    name: 'f.txt', type: 'file', path: '/home/user/meta/f.txt', size: 5, mode: 0o640,
    permissions: '-rw-r-----', owner: 'user', group: 'user', modifiedTime: undefined,
    symlinkTarget: undefined, metadata: undefined })
  assert.ok(fi.modifiedTime instanceof Date)
  assert.equal(fi.modifiedTime.getTime(), Number(ex.text))
  const di = await sbx.files.getInfo('/home/user/meta/d')
  assert.deepEqual([di.type, di.mode, di.permissions], ['dir', 0o777, 'dtrwxrwxrwx'])
  const si = await sbx.files.getInfo('/home/user/meta/s')
  assert.deepEqual([si.mode, si.permissions, si.size], [0o755, 'urwxr-xr-x', 0])
  // the same fields from ListDir and Move
  const metaList = await sbx.files.list('/home/user/meta')
  assert.deepEqual(metaList.find((e) => e.name === 'f.txt'), fi)
  const moved = await sbx.files.rename('/home/user/meta/f.txt', '/home/user/meta/g.txt')
  assert.deepEqual({ ...moved, modifiedTime: fi.modifiedTime },
    { ...fi, name: 'g.txt', path: '/home/user/meta/g.txt' })
  step('file metadata')

  // ---- watchDir: envd's events, from files.write and from code; recursive ----
  await sbx.files.makeDir('/home/user/watched')
  const waitEvent = async (list, name, type, what) => {
    const t = Date.now()
    const hit = () => list.some((e) => e.name === name && e.type === type)
    while (!hit() && Date.now() - t < 30_000) await sleep(50)
    assert.ok(hit(), `${what}: no ${type} of ${name} in ${JSON.stringify(list)}`)
  }
  const flat = []
  const wh = await sbx.files.watchDir('/home/user/watched', (e) => flat.push(e))
  await sbx.files.write('/home/user/watched/sdk.txt', 'x')
  await waitEvent(flat, 'sdk.txt', FilesystemEventType.WRITE, 'files.write')
  await sbx.runCode('open("/home/user/watched/code.txt", "w").write("y")')
  await waitEvent(flat, 'code.txt', FilesystemEventType.CREATE, 'runCode')
  await waitEvent(flat, 'code.txt', FilesystemEventType.WRITE, 'runCode')
  await sbx.files.rename('/home/user/watched/sdk.txt', '/home/user/watched/sdk2.txt')
  await waitEvent(flat, 'sdk.txt', FilesystemEventType.RENAME, 'rename')
  await sbx.files.remove('/home/user/watched/sdk2.txt')
  await waitEvent(flat, 'sdk2.txt', FilesystemEventType.REMOVE, 'remove')
  await sbx.runCode('os.chmod("/home/user/watched/code.txt", 0o600)')
  await waitEvent(flat, 'code.txt', FilesystemEventType.CHMOD, 'chmod')
  const deep = []
  const rh = await sbx.files.watchDir('/home/user/watched', (e) => deep.push(e),
    { recursive: true })
  await sbx.files.makeDir('/home/user/watched/sub')
  await waitEvent(deep, 'sub', FilesystemEventType.CREATE, 'makeDir')
  await sbx.files.write('/home/user/watched/sub/deep.txt', 'z')
  await waitEvent(deep, 'sub/deep.txt', FilesystemEventType.WRITE, 'a new subdirectory')
  await sbx.runCode('os.makedirs("/home/user/watched/a/b")\n' +
    'open("/home/user/watched/a/b/c.txt", "w").write("c")')
  await waitEvent(deep, 'a/b/c.txt', FilesystemEventType.CREATE, 'made with its directories')
  await rh.stop()
  await wh.stop()
  assert.ok(!flat.some((e) => e.name.includes('/')), `not recursive: ${JSON.stringify(flat)}`)
  await expectReject(sbx.files.watchDir('/home/user/watched/code.txt', () => {}),
    /not a directory/i, 'watching a file')
  const missing = await expectReject(sbx.files.watchDir('/home/user/nowhere', () => {}),
    /no such directory/i, 'watching a missing directory')
  assert.equal(missing.name, 'FileNotFoundError')
  step('watchDir')

  // ---- signed file URLs: built by the SDK, fetched without it ----
  const dl = await sbx.downloadUrl('/home/user/data/hello.txt', { useSignatureExpiration: 600 })
  assert.equal(new URL(dl).pathname, '/files') // the SDK drops E2B_SANDBOX_URL's path
  let sres = await fetch(dl)
  assert.equal(sres.status, 200)
  assert.equal(await sres.text(), 'hello e2b')
  sres = await fetch(await sbx.downloadUrl('data/hello.txt')) // no expiration
  assert.equal(await sres.text(), 'hello e2b')
  const ul = await sbx.uploadUrl('/home/user/signed/up.txt', { useSignatureExpiration: 600 })
  const form = new FormData()
  form.append('file', 'uploaded through a signed URL') // a part without a file name
  sres = await fetch(ul, { method: 'POST', body: form })
  const upBody = await sres.text()
  assert.equal(sres.status, 200, upBody)
  assert.deepEqual(JSON.parse(upBody),
    [{ name: 'up.txt', type: 'file', path: '/home/user/signed/up.txt' }])
  assert.equal(await sbx.files.read('/home/user/signed/up.txt'), 'uploaded through a signed URL')
  const blobForm = new FormData()
  blobForm.append('file', new Blob([new Uint8Array([0, 1, 2])]), 'ignored-name')
  sres = await fetch(await sbx.uploadUrl('signed/bin'), { method: 'POST', body: blobForm })
  assert.equal(sres.status, 200, await sres.text())
  assert.deepEqual([...(await sbx.files.read('/home/user/signed/bin', { format: 'bytes' }))],
    [0, 1, 2])
  sres = await fetch(await sbx.downloadUrl('data/hello.txt', { useSignatureExpiration: -10 }))
  assert.equal(sres.status, 401)
  assert.equal((await sres.json()).message, 'signature is already expired')
  const wrongSig = new URL(dl)
  wrongSig.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
  sres = await fetch(wrongSig)
  assert.equal(sres.status, 401)
  assert.equal((await sres.json()).message, 'invalid signature')
  sres = await fetch(dl, { method: 'POST', body: form }) // a read URL does not write
  assert.equal(sres.status, 401)
  step('signed URLs')

  // ---- contexts: another kernel in the same workspace ----
  const ctx = await sbx.createCodeContext()
  ex = await sbx.runCode('x', { context: ctx })
  assert.equal(ex.error.name, 'NameError') // its own state
  ex = await sbx.runCode('open("/home/user/data/hello.txt").read()', { context: ctx })
  assert.equal(ex.text, 'hello e2b') // the same files
  const ctxs = await sbx.listCodeContexts()
  assert.ok(ctxs.some((c) => c.id === ctx.id))
  await sbx.removeCodeContext(ctx)
  step('contexts')

  // ---- commands.run (process.Start) ----
  const r = await sbx.commands.run('echo out; echo err >&2; exit 3').catch((e) => e)
  assert.equal(r.exitCode, 3)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  const ok = await sbx.commands.run('cat /home/user/data/hello.txt')
  assert.equal(ok.stdout, 'hello e2b')
  // the sandbox's envVars and the command's own; a working directory under /home/user
  const env = await sbx.commands.run('echo "$GREETING/$EXTRA"; pwd', {
    envs: { EXTRA: 'x1' }, cwd: '/home/user/data' })
  assert.equal(env.stdout, 'hi from envs/x1\n/home/user/data\n')
  // streamed, and killed through SendSignal
  const parts = []
  const bg = await sbx.commands.run('echo started; sleep 60', {
    background: true, onStdout: (d) => parts.push(d) })
  const t0 = Date.now()
  while (!parts.join('').includes('started') && Date.now() - t0 < 30_000) await sleep(100)
  assert.equal(parts.join(''), 'started\n')
  assert.equal(await bg.kill(), true)
  const killed = await bg.wait().catch((e) => e)
  assert.notEqual(killed.exitCode, 0)
  assert.ok(Date.now() - t0 < 30_000, 'killed, not waited for')
  step('commands.run')
  // stdin: sent as it comes, closed for EOF
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'hello ')
  await cat.sendStdin(new TextEncoder().encode('stdin'))
  await cat.closeStdin()
  const catEnd = await cat.wait()
  assert.equal(catEnd.exitCode, 0)
  assert.equal(catEnd.stdout, 'hello stdin')
  const noStdin = await sbx.commands.run('sleep 30', { background: true })
  await expectReject(sbx.commands.sendStdin(noStdin.pid, 'x'), /stdin/i, 'stdin not asked for')
  const listed1 = await sbx.commands.list()
  const mine = listed1.find((p) => p.pid === noStdin.pid)
  assert.ok(mine, `commands.list: ${JSON.stringify(listed1)}`)
  assert.equal(mine.cmd, '/bin/bash')
  assert.deepEqual(mine.args, ['-l', '-c', 'sleep 30'])
  await noStdin.kill()
  step('commands stdin, list')
  // ---- commands.connect (process.Connect): a command outlives its client ----
  const detached = await sbx.commands.run(
    'for i in $(seq 1 40); do echo tick$i; sleep 0.25; done', { background: true })
  await detached.disconnect()
  await sleep(500)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === detached.pid),
    'a detached command runs on')
  const later = []
  const attached = await sbx.commands.connect(detached.pid, { onStdout: (d) => later.push(d) })
  assert.equal(attached.pid, detached.pid)
  const t1 = Date.now()
  while (!later.join('').includes('tick') && Date.now() - t1 < 30_000) await sleep(100)
  const ticks = later.join('').split('\n').filter(Boolean)
  assert.ok(ticks.length > 0 && !ticks.includes('tick1'), `only what comes after: ${ticks}`)
  const detachedEnd = await attached.wait()
  assert.equal(detachedEnd.exitCode, 0)
  assert.ok(detachedEnd.stdout.includes('tick40\n'), detachedEnd.stdout)
  // two clients at once: both see the output and the end
  const first = []
  const twice = await sbx.commands.run('sleep 1; echo both; sleep 0.5; exit 4', {
    background: true, onStdout: (d) => first.push(d) })
  const second = await sbx.commands.connect(twice.pid)
  assert.equal(second.pid, twice.pid)
  const [e1, e2] = await Promise.all([twice.wait().catch((e) => e), second.wait().catch((e) => e)])
  assert.deepEqual([e1.exitCode, e2.exitCode], [4, 4])
  assert.equal(e1.stdout, 'both\n')
  assert.equal(e2.stdout, 'both\n')
  assert.equal(first.join(''), 'both\n')
  // a pid that is not there (never, or ended)
  await expectReject(sbx.commands.connect(999999), /not found|not_found/i, 'connect: no such pid')
  await expectReject(sbx.commands.connect(twice.pid), /not found|not_found/i, 'connect: it ended')
  // kill a detached one: listed until then, gone after
  const longOne = await sbx.commands.run('sleep 60', { background: true })
  await longOne.disconnect()
  await sleep(300)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === longOne.pid))
  assert.equal(await sbx.commands.kill(longOne.pid), true)
  const t2 = Date.now()
  while ((await sbx.commands.list()).some((p) => p.pid === longOne.pid) && Date.now() - t2 < 10_000)
    await sleep(100)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === longOne.pid), 'killed')
  step('commands.connect')
  await expectReject(sbx.pty.create({ cols: 80, rows: 24, onData: () => {} }),
    /not offered|unimplemented/i, 'a PTY')
  step('unimplemented calls')

  // ---- setTimeout, getInfo ----
  await sbx.setTimeout(120_000)
  const gi = await sbx.getInfo()
  const left = gi.endAt.getTime() - Date.now()
  assert.ok(left > 60_000 && left <= 125_000, `endAt in ${left} ms`)
  assert.equal(gi.metadata.purpose, 'kgw-e2b-test')
  assert.equal(gi.templateId, 'code-interpreter-v1')
  step('setTimeout')

  // ---- connect: the same sandbox, its state ----
  const again = await Sandbox.connect(sbx.sandboxId)
  ex = await again.runCode('x')
  assert.equal(ex.text, '41')
  const listed = await Sandbox.list().nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId))
  step('connect')

  // ---- pause: frozen in place, listed as paused, its plane 502; connect resumes it ----
  await sbx.runCode('import time\nt_paused = time.time()')
  assert.equal(await sbx.betaPause(), true)
  assert.equal(await sbx.pause(), false) // 409: already paused
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(paused[0].state, 'paused')
  const runningOnly = await Sandbox.list({ query: { state: ['running'] } }).nextItems()
  assert.ok(!runningOnly.some((s) => s.sandboxId === sbx.sandboxId))
  assert.equal(await sbx.isRunning(), false) // as E2B's: its envd is not reachable
  await expectReject(sbx.runCode('1'), /paused|502|timeout|not running/i, 'runCode while paused')
  await sleep(1500)
  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  assert.equal(await resumed.isRunning(), true)
  ex = await resumed.runCode('x')
  assert.equal(ex.text, '41') // its state kept
  // frozen, not sleeping: the kernel's clock went on, its code did not run meanwhile
  ex = await resumed.runCode('time.time() - t_paused >= 1.4')
  assert.equal(ex.text, 'True')
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  const endAt = (await Sandbox.getInfo(sbx.sandboxId)).endAt.getTime() - Date.now()
  assert.ok(endAt > 100_000 && endAt <= 125_000, `endAt in ${endAt} ms after the resume`)
  // the deprecated resume: 409 for a running sandbox
  const rs = await fetch(`${process.env.E2B_API_URL}/sandboxes/${sbx.sandboxId}/resume`, {
    method: 'POST',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: '{}',
  })
  assert.equal(rs.status, 409)
  step('pause and connect')

  // ---- tenancy: another tenant's key, a wrong token ----
  await expectReject(Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), /not found/i,
    'another tenant connects')
  await expectReject(Sandbox.kill(sbx.sandboxId, { apiKey: otherKey }).then((k) => {
    if (!k) throw new Error('not found')
  }), /not found/i, 'another tenant kills')
  const otherList = await Sandbox.list({ apiKey: otherKey }).nextItems()
  assert.ok(!otherList.some((s) => s.sandboxId === sbx.sandboxId))
  await expectReject(Sandbox.create({ apiKey: 'not-a-key' }), /401|auth|key/i, 'a wrong key')
  for (const token of ['wrong', sbx.envdAccessToken + 'x', '']) {
    const res = await fetch(`${sbxUrl}/execute`, {
      method: 'POST',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token,
        'Content-Type': 'application/json' },
      body: JSON.stringify({ code: '1' }),
    })
    assert.equal(res.status, 401, `token ${JSON.stringify(token)}`)
    assert.equal((await res.json()).reason, 'Unauthorized')
  }
  // the SDK's own client, given this sandbox's id but another token
  const forged = new CoreSandbox({ sandboxId: sbx.sandboxId, envdVersion: '0.5.6',
    envdAccessToken: 'f'.repeat(48) })
  await expectReject(forged.files.read('/home/user/data/hello.txt'), /401|access token/i,
    'a forged token')
  step('tenancy')

  // ---- killed while a run or a command is in flight: E2B's TimeoutError, not an output ----
  assert.equal(await Sandbox.kill('x'), false)
  for (const what of ['runCode', 'command']) {
    const doomed = await Sandbox.create({ timeoutMs: 600_000 })
    const started = []
    const p = what === 'runCode'
      ? doomed.runCode('import time\nprint("started", flush=True)\ntime.sleep(60)',
        { onStdout: (m) => started.push(m.line) })
      : doomed.commands.run('echo started; sleep 60', { onStdout: (d) => started.push(d) })
    const t1 = Date.now()
    while (!started.length && Date.now() - t1 < 30_000) await sleep(50)
    assert.ok(started.length, `${what} never started`)
    assert.equal(await Sandbox.kill(doomed.sandboxId), true)
    const err = await expectReject(p, /killed/i, `${what} of a killed sandbox`)
    assert.equal(err.name, 'TimeoutError', `${what}: ${err.name}: ${err.message}`)
    assert.ok(Date.now() - t1 < 30_000, `${what}: the kill was not waited out`)
  }
  step('killed mid-run')

  // ---- kill: its tokens die with it ----
  const oldToken = sbx.envdAccessToken
  await sbx.kill()
  await expectReject(sbx.runCode('1'), /.+/, 'runCode after kill')
  await expectReject(Sandbox.getInfo(sbx.sandboxId), /not found/i, 'getInfo after kill')
  const res = await fetch(`${sbxUrl}/files?path=data/hello.txt`, {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': oldToken },
  })
  assert.equal(res.status, 502)
  step('kill')

  // ---- the previous create path (e2b 2.50.0: POST /sandboxes) ----
  await expectReject(OldSandbox.create('base'), /internet/i, 'default allow_internet_access')
  const old = await OldSandbox.create('base', { allowInternetAccess: false, timeoutMs: 60_000 })
  await old.files.write('/home/user/old.txt', 'from 2.50')
  assert.equal(await old.files.read('/home/user/old.txt'), 'from 2.50')
  const oldAgain = await OldSandbox.connect(old.sandboxId)
  assert.equal(await oldAgain.files.read('old.txt'), 'from 2.50')
  assert.equal(await old.isRunning(), true)
  await old.kill()
  assert.equal(await old.isRunning(), false)
  step('e2b 2.50.0')

  // ---- refusals: what kgw does not offer ----
  await expectReject(CoreSandbox.create('base', { allowInternetAccess: true }), /internet/i,
    'internet access')
  await expectReject(CoreSandbox.create('no-such-template'), /not offered/i, 'a template')
  await expectReject(CoreSandbox.create('base',
    { lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }), /memory/i,
  'a filesystem-only autoPause')
  await expectReject(CoreSandbox.create('base',
    { lifecycle: { onTimeout: 'pause', autoResume: true } }), /autoResume/i, 'autoResume')
  step('refusals')

  // ---- autoPause: paused, not killed, at its timeout; connect resumes it ----
  const napper = await CoreSandbox.create('base', { timeoutMs: 3_000, allowInternetAccess: false,
    lifecycle: { onTimeout: 'pause' } })
  await napper.files.write('/home/user/nap.txt', 'kept')
  const napEnd = Date.now() + 60_000
  let napped = false
  while (Date.now() < napEnd && !napped) {
    await sleep(500)
    napped = (await CoreSandbox.getInfo(napper.sandboxId)).state === 'paused'
  }
  assert.ok(napped, 'the sandbox was paused at its timeout')
  await sleep(1500) // still there, still paused
  assert.equal((await CoreSandbox.getInfo(napper.sandboxId)).state, 'paused')
  const woken = await CoreSandbox.connect(napper.sandboxId, { timeoutMs: 60_000 })
  assert.equal(await woken.files.read('/home/user/nap.txt'), 'kept')
  await woken.kill()
  step('autoPause')

  // ---- expiry at the timeout ----
  const short = await Sandbox.create({ timeoutMs: 3_000 })
  ex = await short.runCode('1 + 1')
  assert.equal(ex.text, '2')
  const deadline = Date.now() + 60_000
  let gone = false
  while (Date.now() < deadline && !gone) {
    await sleep(500)
    gone = !(await short.isRunning())
  }
  assert.ok(gone, 'the sandbox ended at its timeout')
  await expectReject(Sandbox.getInfo(short.sandboxId), /not found/i, 'getInfo after expiry')
  step('expiry')
  console.log('ALL OK')
}

main().catch((e) => {
  console.error('FAILED:', e && e.stack ? e.stack : e)
  process.exit(1)
})
