// The playground page (GET /) in headless Chromium, as a user drives it: enter the key, run a
// print, a plot, an error, an HTML output that tries to reach the page, upload a file and read
// it from code, download a file the code wrote, cancel, interrupt and restart. Fails on any
// console error or CSP violation of the page. Started by tests/integration/test_playground.py.
//
//   node playground.mjs PAGE_URL API_KEY ARTIFACT_DIR
//
// PAGE_URL is the page itself (http://127.0.0.1:PORT/ or under a prefix, .../s/<shard>/);
// screenshots and the downloaded file go to ARTIFACT_DIR. Exit 0 and a last line "PASS: ..."
// only when every check passed. Env: KGW_CHROMIUM (default /usr/bin/chromium),
// KGW_CLIENT_TIMEOUT_MS (a step's timeout, default 120000), KGW_ACCEPT_INSECURE_CERTS=1 (a
// self-signed test certificate).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [pageUrl, apiKey, artifacts] = process.argv.slice(2);
if (!pageUrl || apiKey === undefined || !artifacts) {
  console.error('usage: node playground.mjs PAGE_URL API_KEY ARTIFACT_DIR');
  process.exit(2);
}
const STEP_MS = Number(process.env.KGW_CLIENT_TIMEOUT_MS || 120000);
const CHROMIUM = process.env.KGW_CHROMIUM || '/usr/bin/chromium';

const log = (...a) => console.log('[playground]', ...a);
function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  log('ok:', what);
}

const consoleLog = []; // every console message: {type, text, url, step}
const pageErrors = [];
const requests = []; // {method, url, step}
let step = 'load';
let shot = 0;

async function screenshot(page, name) {
  const file = path.join(artifacts, String(++shot).padStart(2, '0') + '-' + name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  log('screenshot', file);
}

// Runs code with Ctrl-Enter in the editor; resolves to the newest execution's box once its
// end event is shown.
async function runCode(page, code) {
  await page.waitForSelector('#run:not([disabled])', { timeout: STEP_MS });
  const before = await page.$$eval('#output .execution', (l) => l.length);
  await page.$eval('#code', (e, v) => { e.value = v; }, code);
  await page.focus('#code');
  await page.keyboard.down('Control');
  await page.keyboard.press('Enter');
  await page.keyboard.up('Control');
  await page.waitForFunction((n) => {
    const l = document.querySelectorAll('#output .execution');
    return l.length > n && l[0].dataset.status;
  }, { timeout: STEP_MS }, before);
  return page.$eval('#output .execution', (box) => ({
    status: box.dataset.status,
    stdout: [...box.querySelectorAll('pre.stdout')].map((e) => e.textContent).join(''),
    stderr: [...box.querySelectorAll('pre.stderr')].map((e) => e.textContent).join(''),
    traceback: [...box.querySelectorAll('pre.traceback')].map((e) => e.textContent).join(''),
    results: [...box.querySelectorAll('pre.result')].map((e) => e.textContent),
    images: [...box.querySelectorAll('img')].map((i) => ({
      src: i.src.slice(0, 22), complete: i.complete, width: i.naturalWidth,
    })),
    frames: [...box.querySelectorAll('iframe')].map((f) => ({
      sandbox: f.getAttribute('sandbox'), src: f.src.slice(0, 5),
    })),
    end: box.querySelector('.end') ? box.querySelector('.end').textContent : '',
  }));
}

async function waitFile(file, content) {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline) {
    try {
      if (fs.readFileSync(file, 'utf8') === content) return true;
    } catch (e) { /* not there yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

async function main() {
  fs.mkdirSync(artifacts, { recursive: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'kgw-playground-chromium-'));
  const downloads = path.join(artifacts, 'downloads');
  fs.mkdirSync(downloads, { recursive: true });
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    // --no-sandbox: CI runs as root, and Chromium refuses to start its own (setuid/namespace)
    // sandbox as root; the browser only loads the gateway under test on loopback.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
           '--no-default-browser-check', '--disable-extensions', '--disable-sync',
           '--disable-background-networking', '--disable-component-update'],
    protocolTimeout: STEP_MS * 2,
    // the HTTPS variant's gateway has a self-signed certificate made for the test
    acceptInsecureCerts: process.env.KGW_ACCEPT_INSECURE_CERTS === '1',
  });
  try {
    const cdp = await browser.target().createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    page.setDefaultTimeout(STEP_MS);
    page.on('console', (m) => {
      const loc = m.location() || {};
      consoleLog.push({ type: m.type(), text: m.text(), url: loc.url || '', step });
      log(`console.${m.type()} [${step}] ${loc.url || ''}: ${m.text()}`);
    });
    page.on('pageerror', (e) => {
      pageErrors.push({ text: String(e), step });
      log(`pageerror [${step}]: ${e}`);
    });
    page.on('request', (r) => requests.push({ method: r.method(), url: r.url(), step }));
    // CSP violations of the page's own document (HTML outputs are frames of their own)
    await page.evaluateOnNewDocument(() => {
      window.__kgwViolations = [];
      document.addEventListener('securitypolicyviolation', (e) => {
        window.__kgwViolations.push(e.violatedDirective + ' ' + e.blockedURI);
      });
    });

    const resp = await page.goto(pageUrl, { waitUntil: 'load' });
    check(resp.status() === 200, 'the page loads (200)');
    const csp = resp.headers()['content-security-policy'] || '';
    check(csp.includes("script-src 'self'") && !csp.includes('unsafe'), 'the page has its CSP');
    check((await page.title()) === 'kgw playground', 'the title');
    await screenshot(page, 'loaded');

    step = 'connect';
    await page.type('#key', apiKey);
    await page.click('#connect');
    await page.waitForSelector('#run:not([disabled])', { timeout: STEP_MS });
    const stored = await page.evaluate(() => sessionStorage.getItem('kgw.playground.key'));
    check(stored === apiKey, 'the key is kept in session storage');
    const local = await page.evaluate(() => localStorage.length);
    check(local === 0, 'nothing in local storage');
    const kernelText = await page.$eval('#kernel', (e) => e.textContent);
    check(/^kernel [0-9a-f-]{36}$/.test(kernelText), 'a kernel: ' + kernelText);
    await screenshot(page, 'connected');
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#run:not([disabled])', { timeout: STEP_MS });
    check((await page.$eval('#kernel', (e) => e.textContent)) === kernelText,
          'a reload keeps the key and the kernel (session storage)');

    step = 'print';
    let r = await runCode(page, 'import sys\nprint("hello", 6 * 7)\n' +
                                'print("careful", file=sys.stderr)\n"result:" + str(7)');
    check(r.status === 'ok', 'print: status ok');
    check(r.stdout.includes('hello 42'), 'print: stdout shown');
    check(r.stderr.includes('careful'), 'print: stderr shown');
    check(r.results.some((t) => t.includes("'result:7'")), 'print: the result shown');
    check(/ms/.test(r.end) && /peak memory/.test(r.end), 'print: duration and memory shown');
    await screenshot(page, 'print');

    step = 'plot';
    r = await runCode(page, 'import matplotlib.pyplot as plt\n' +
                            'plt.plot([1, 3, 2, 4]); plt.title("kgw"); plt.show()');
    check(r.status === 'ok', 'plot: status ok');
    check(r.images.length === 1 && r.images[0].src.startsWith('data:image/png;base64'),
          'plot: an <img> from a data: URL');
    await page.waitForFunction(() => {
      const i = document.querySelector('#output .execution img');
      return i && i.complete && i.naturalWidth > 0;
    }, { timeout: STEP_MS });
    check(true, 'plot: the image decoded (allowed by the CSP)');
    await screenshot(page, 'plot');

    step = 'error';
    r = await runCode(page, 'def f():\n    return 1 / 0\nf()');
    check(r.status === 'error', 'error: status error');
    check(r.traceback.includes('ZeroDivisionError') && r.traceback.includes('f()'),
          'error: the traceback shown');
    check(!r.traceback.includes('\x1b['), 'error: no ANSI escapes');
    await screenshot(page, 'error');

    step = 'upload';
    const token = 'uploaded-' + Date.now();
    const local1 = path.join(profile, 'data.txt');
    fs.writeFileSync(local1, token);
    const input = await page.$('#upload-file');
    await input.uploadFile(local1);
    await page.type('#upload-path', 'inbox/data.txt');
    await page.click('#upload');
    await page.waitForSelector('#files li[data-path="inbox/data.txt"]', { timeout: STEP_MS });
    check(true, 'upload: the file is listed');
    r = await runCode(page, 'print(open("inbox/data.txt").read()[::-1])');
    check(r.status === 'ok' && r.stdout.includes([...token].reverse().join('')),
          'upload: the code read the uploaded file');
    await screenshot(page, 'upload');

    step = 'download';
    const written = 'written by the kernel ' + Date.now();
    r = await runCode(page, 'import os\nos.makedirs("out", exist_ok=True)\n' +
                            `open("out/result.txt", "w").write(${JSON.stringify(written)})`);
    check(r.status === 'ok' && r.end.includes('created: out/result.txt'),
          'download: the end lists the created file');
    const row = await page.waitForSelector('#files li[data-path="out/result.txt"] button.download',
                                           { timeout: STEP_MS });
    await row.click();
    check(await waitFile(path.join(downloads, 'result.txt'), written),
          'download: the file saved has what the code wrote');
    await screenshot(page, 'download');

    // Everything so far: not one error or violation in the console, none in the document.
    const violations = await page.evaluate(() => window.__kgwViolations);
    check(violations.length === 0, 'no securitypolicyviolation event: ' + JSON.stringify(violations));
    const bad = consoleLog.filter((m) => m.type === 'error' || m.type === 'warn' ||
                                         /Content Security Policy/i.test(m.text));
    check(bad.length === 0, 'no console errors or warnings: ' + JSON.stringify(bad));
    check(pageErrors.length === 0, 'no page errors: ' + JSON.stringify(pageErrors));

    step = 'html';
    const kernelsBefore = requests.length;
    const title = await page.title();
    r = await runCode(page, [
      'from IPython.display import HTML, display',
      'display(HTML("""<p id=inner>an HTML output</p>',
      '<script>parent.document.body.dataset.pwned = "script";',
      'top.document.title = "pwned"; sessionStorage.setItem("pwned", "1");',
      'fetch("api/kernels", {method: "POST", headers: {Authorization: "Bearer " +',
      '  parent.sessionStorage.getItem("kgw.playground.key")}});</script>',
      '<img src="x" onerror="parent.document.body.dataset.pwned = \'onerror\'">',
      '<form action="api/kernels" method="post"><button id=b>go</button></form>',
      '<a id=l href="api/kernels" target="_top">top</a>"""))',
    ].join('\n'));
    check(r.status === 'ok', 'html: status ok');
    check(r.frames.length === 1 && r.frames[0].sandbox === '' && r.frames[0].src === 'blob:',
          'html: rendered in a sandboxed frame (no allow-scripts, no allow-same-origin)');
    // a user clicks the output's form button and its target=_top link: the sandbox blocks both
    const frame = page.frames().find((f) => f.url().startsWith('blob:'));
    check(!!frame, 'html: the output frame is there');
    check((await frame.$eval('#inner', (e) => e.textContent)) === 'an HTML output',
          'html: the output is rendered');
    await frame.click('#b');
    await frame.click('#l');
    await new Promise((res) => setTimeout(res, 1500)); // give any script or navigation time
    const pwned = await page.evaluate(() => ({
      body: document.body.dataset.pwned || null,
      storage: sessionStorage.getItem('pwned'),
      url: location.href,
    }));
    check(pwned.body === null && pwned.storage === null, 'html: the page is untouched');
    check((await page.title()) === title && pwned.url === resp.url(), 'html: title and URL kept');
    const later = requests.slice(kernelsBefore).filter((q) => q.method === 'POST' &&
                                                           /api\/kernels$/.test(q.url));
    check(later.length === 0, 'html: the output made no request to the API');
    const pageBad = consoleLog.filter((m) => m.step === 'html' && !m.url.startsWith('blob:') &&
                                             m.type === 'error' &&
                                             !/^Blocked (script execution|form submission) /.test(m.text) &&
                                             !/^Unsafe attempt to initiate navigation/.test(m.text));
    check(pageBad.length === 0, 'html: no error of the page itself: ' + JSON.stringify(pageBad));
    const blocked = (re) => consoleLog.some((m) => m.step === 'html' && re.test(m.text));
    check(blocked(/^Blocked script execution/) && blocked(/^Blocked form submission/) &&
          blocked(/^Unsafe attempt to initiate navigation/),
          'html: the script, the form and the link were tried, and blocked by the sandbox');
    await screenshot(page, 'html');

    step = 'cancel';
    await page.$eval('#code', (e) => { e.value = 'import time\nprint("waiting", flush=True)\ntime.sleep(300)'; });
    await page.click('#run');
    await page.waitForSelector('#cancel:not([disabled])', { timeout: STEP_MS });
    await page.waitForFunction(() => {
      const b = document.querySelector('#output .execution pre.stdout');
      return b && b.textContent.includes('waiting');
    }, { timeout: STEP_MS });
    await page.click('#cancel');
    await page.waitForFunction(() => document.querySelector('#output .execution').dataset.status,
                               { timeout: STEP_MS });
    r = await page.$eval('#output .execution', (b) => b.dataset.status);
    check(r === 'cancelled', 'cancel: the execution ends cancelled (' + r + ')');
    await screenshot(page, 'cancel');

    step = 'interrupt';
    await page.waitForSelector('#run:not([disabled])');
    await page.$eval('#code', (e) => { e.value = 'import time\nprint("sleeping", flush=True)\ntime.sleep(300)'; });
    await page.click('#run');
    await page.waitForFunction(() => {
      const b = document.querySelector('#output .execution pre.stdout');
      return b && b.textContent.includes('sleeping');
    }, { timeout: STEP_MS });
    await page.click('#interrupt');
    await page.waitForFunction(() => document.querySelector('#output .execution').dataset.status,
                               { timeout: STEP_MS });
    r = await page.$eval('#output .execution', (b) => ({
      status: b.dataset.status,
      traceback: b.querySelector('pre.traceback') ? b.querySelector('pre.traceback').textContent : '',
    }));
    check(r.status === 'error' && r.traceback.includes('KeyboardInterrupt'),
          'interrupt: the execution ends with KeyboardInterrupt');
    await screenshot(page, 'interrupt');

    step = 'restart';
    await page.click('#restart');
    await page.waitForFunction(() => /restart: done/.test(document.querySelector('#status').textContent),
                               { timeout: STEP_MS });
    r = await runCode(page, 'print("x" in dir())');
    check(r.status === 'ok' && r.stdout.includes('False'), 'restart: a fresh interpreter runs');
    await screenshot(page, 'restart');

    // (a full-page screenshot may leave the out-of-process frame blank; its document is there)
    const frame2 = page.frames().find((f) => f.url().startsWith('blob:'));
    check(frame2 && (await frame2.$eval('#inner', (e) => e.textContent)) === 'an HTML output',
          'the HTML output is still shown at the end');
    const violations2 = await page.evaluate(() => window.__kgwViolations);
    check(violations2.length === 0, 'no securitypolicyviolation event at the end');
    const bad2 = consoleLog.filter((m) => m.step !== 'html' && (m.type === 'error' ||
                                          /Content Security Policy/i.test(m.text)));
    check(bad2.length === 0, 'no console errors outside the HTML step: ' + JSON.stringify(bad2));
    check(pageErrors.length === 0, 'no page errors at the end');

    // leave nothing behind: the page's kernel goes with the test
    step = 'cleanup';
    await page.evaluate(async () => {
      const id = sessionStorage.getItem('kgw.playground.kernel');
      await fetch('api/kernels/' + id, {
        method: 'DELETE',
        headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kgw.playground.key') },
      });
    });
    console.log('PASS: playground page: print, plot, error, HTML isolation, upload, download, ' +
                'cancel, interrupt, restart; no console errors, no CSP violations');
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.log('FAIL:', e && e.stack ? e.stack : e);
  process.exit(1);
});
