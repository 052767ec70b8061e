// kgw playground: runs code through the execute API and manages the kernel's workspace through
// the files API (docs/playground.md). Served by the gateway itself under a strict CSP: no
// inline script, no eval, no innerHTML (Trusted Types with no policy). Every URL is relative
// to the page, so the page works behind a path prefix (/s/<shard>/, a reverse proxy).
'use strict';

(function () {
  const KEY = 'kgw.playground.key';
  const KERNEL = 'kgw.playground.kernel';
  const $ = (id) => document.getElementById(id);
  const state = {
    key: sessionStorage.getItem(KEY) || '',
    kernel: null, // the kernel's id
    workspace: null, // its workspace id (files API)
    running: null, // the execution streaming now: {id, abort}
  };

  // ---- the API ----

  function headers(extra) {
    const h = new Headers(extra || {});
    if (state.key) h.set('Authorization', 'Bearer ' + state.key);
    return h;
  }

  // The error a non-2xx answer carries: the gateway answers {"reason", "message"}.
  async function failure(resp) {
    let msg = resp.status + ' ' + resp.statusText;
    try {
      const body = await resp.json();
      if (body && typeof body.message === 'string') msg = resp.status + ': ' + body.message;
    } catch (e) { /* not JSON: the status says enough */ }
    return new Error(msg);
  }

  // A JSON call; resolves to the parsed answer (null for 204).
  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      init.headers.set('Content-Type', 'application/json');
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (!resp.ok) throw await failure(resp);
    return resp.status === 204 ? null : resp.json();
  }

  // A workspace path in a URL: each component percent-encoded ('%', '?', '#', ';', '&', '+').
  function encodePath(path) {
    return path.split('/').map(encodeURIComponent).join('/');
  }

  function filesUrl(route, path) {
    const ws = '?workspace=' + encodeURIComponent(state.workspace);
    return route + (path === undefined ? '' : '/' + encodePath(path)) + ws;
  }

  // ---- status and buttons ----

  function setStatus(text, isError) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('error', !!isError);
  }

  function report(e) {
    setStatus(e && e.message ? e.message : String(e), true);
  }

  function updateButtons() {
    const ready = !!state.kernel;
    $('run').disabled = !ready || !!state.running;
    $('cancel').disabled = !state.running || !state.running.id;
    for (const id of ['interrupt', 'restart', 'new-kernel', 'refresh', 'upload'])
      $(id).disabled = !ready;
    $('kernel').textContent = ready ? 'kernel ' + state.kernel : '';
  }

  // ---- the kernel ----

  async function useKernel(model) {
    state.kernel = model.id;
    state.workspace = model.workspace || null;
    sessionStorage.setItem(KERNEL, model.id);
    updateButtons();
    setStatus('connected: kernel ' + model.id.slice(0, 8) + ' (' + model.execution_state + ')');
    await refreshFiles();
  }

  async function connect() {
    state.kernel = null;
    updateButtons();
    setStatus('connecting ...');
    const old = sessionStorage.getItem(KERNEL);
    let model = null;
    if (old && /^[0-9A-Za-z_-]{1,64}$/.test(old)) {
      try {
        model = await api('GET', 'api/kernels/' + old);
      } catch (e) { /* gone, or another key's: start a new one */ }
    }
    if (!model) {
      setStatus('starting a kernel ...');
      model = await api('POST', 'api/kernels', {});
    }
    await useKernel(model);
  }

  async function newKernel() {
    if (state.running) state.running.abort.abort();
    const old = state.kernel;
    state.kernel = null;
    sessionStorage.removeItem(KERNEL);
    updateButtons();
    if (old) await api('DELETE', 'api/kernels/' + old).catch(() => {});
    await connect();
  }

  async function kernelAction(action) {
    setStatus(action + ' ...');
    const model = await api('POST', 'api/kernels/' + state.kernel + '/' + action);
    const st = model && model.execution_state ? ' (' + model.execution_state + ')' : '';
    setStatus(action + ': done' + st);
  }

  // ---- outputs ----

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
  const BASE64 = /^[A-Za-z0-9+/=\s]+$/;

  // One MIME bundle as an element: an image (PNG or JPEG, from a data: URL), HTML (in a
  // sandboxed frame of its own, opaque origin, no scripts), or its text.
  function renderBundle(data) {
    for (const mime of ['image/png', 'image/jpeg']) {
      const b64 = data[mime];
      if (typeof b64 === 'string' && BASE64.test(b64)) {
        const img = el('img');
        img.alt = mime + ' output';
        img.src = 'data:' + mime + ';base64,' + b64.replace(/\s+/g, '');
        return img;
      }
    }
    if (typeof data['text/html'] === 'string') {
      const frame = el('iframe', 'html-output');
      // no allow-scripts, no allow-same-origin: the frame's origin is opaque and nothing in it
      // runs; its document (a blob: URL) also inherits this page's CSP
      frame.setAttribute('sandbox', '');
      frame.setAttribute('referrerpolicy', 'no-referrer');
      frame.title = 'HTML output';
      const url = URL.createObjectURL(new Blob([data['text/html']], { type: 'text/html' }));
      frame.addEventListener('load', () => URL.revokeObjectURL(url), { once: true });
      frame.src = url;
      return frame;
    }
    const text = data['text/plain'];
    if (typeof text === 'string') return el('pre', 'result', text.replace(ANSI, ''));
    return el('pre', 'note', '(output of type ' + Object.keys(data).join(', ') + ')');
  }

  function formatBytes(n) {
    if (typeof n !== 'number') return 'n/a';
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1024 / 1024).toFixed(1) + ' MiB';
  }

  function formatMs(ms) {
    return ms < 1000 ? ms.toFixed(1) + ' ms' : (ms / 1000).toFixed(2) + ' s';
  }

  // The view of one execution: its events go into box.
  class ExecutionView {
    constructor(code) {
      this.box = el('div', 'execution');
      this.box.appendChild(el('pre', 'source', code));
      this.out = el('div', 'outputs');
      this.box.appendChild(this.out);
      this.lastStream = null;
      this.displays = new Map(); // display_id -> element
      this.clearPending = false;
      $('output').prepend(this.box);
    }

    add(node) {
      if (this.clearPending) {
        this.out.replaceChildren();
        this.displays.clear();
        this.clearPending = false;
      }
      this.out.appendChild(node);
    }

    event(ev) {
      switch (ev.type) {
        case 'start':
          this.box.dataset.execution = ev.execution_id;
          return;
        case 'stream': {
          const name = ev.name === 'stderr' ? 'stderr' : 'stdout';
          if (this.lastStream && this.lastStream.dataset.name === name && !this.clearPending &&
              this.lastStream.parentNode === this.out) {
            this.lastStream.textContent += ev.text;
          } else {
            this.lastStream = el('pre', name, ev.text);
            this.lastStream.dataset.name = name;
            this.add(this.lastStream);
          }
          return;
        }
        case 'display':
        case 'result': {
          this.lastStream = null;
          const node = renderBundle(ev.data || {});
          const id = ev.display_id;
          if (ev.update) {
            const old = id && this.displays.get(id);
            if (old) old.replaceWith(node);
            if (old) this.displays.set(id, node);
            return;
          }
          if (id) this.displays.set(id, node);
          this.add(node);
          return;
        }
        case 'clear':
          this.lastStream = null;
          if (ev.wait) {
            this.clearPending = true;
          } else {
            this.out.replaceChildren();
            this.displays.clear();
          }
          return;
        case 'error':
          this.lastStream = null;
          this.add(el('pre', 'traceback',
                      (ev.traceback || [ev.ename + ': ' + ev.evalue]).join('\n').replace(ANSI, '')));
          return;
        case 'end':
          this.end(ev);
          return;
        default:
          return;
      }
    }

    end(ev) {
      const line = el('div', 'end');
      line.appendChild(el('span', ev.status === 'ok' ? 'st-ok' : 'st-bad', ev.status));
      const parts = [];
      if (ev.cause) parts.push(ev.cause);
      if (typeof ev.duration_ms === 'number') parts.push(formatMs(ev.duration_ms));
      if (typeof ev.cpu_ms === 'number') parts.push('cpu ' + formatMs(ev.cpu_ms));
      parts.push('peak memory ' + formatBytes(ev.peak_memory_bytes));
      const f = ev.files || {};
      for (const k of ['created', 'modified', 'deleted'])
        if (f[k] && f[k].length) parts.push(k + ': ' + f[k].join(', '));
      if (f.truncated) parts.push('(file changes truncated)');
      line.appendChild(document.createTextNode(' ' + parts.join(' · ')));
      this.box.dataset.status = ev.status;
      this.box.appendChild(line);
    }
  }

  // ---- running code ----

  async function run() {
    if (!state.kernel || state.running) return;
    const code = $('code').value;
    const view = new ExecutionView(code);
    const abort = new AbortController();
    state.running = { id: null, abort };
    updateButtons();
    setStatus('running ...');
    let ended = false;
    try {
      const resp = await fetch('api/kernels/' + state.kernel + '/execute', {
        method: 'POST',
        headers: headers({ 'Content-Type': 'application/json', Accept: 'application/x-ndjson' }),
        body: JSON.stringify({ code }),
        cache: 'no-store',
        credentials: 'omit',
        signal: abort.signal,
      });
      if (!resp.ok) throw await failure(resp);
      // NDJSON: one event a line, read as it streams in
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const ev = JSON.parse(line);
          if (ev.type === 'start') {
            state.running.id = ev.execution_id;
            updateButtons();
          }
          if (ev.type === 'end') {
            ended = true;
            setStatus('execution ' + ev.status);
          }
          view.event(ev);
        }
      }
      if (!ended) throw new Error('the stream ended before the execution did');
    } catch (e) {
      view.add(el('pre', 'traceback', 'playground: ' + (e && e.message ? e.message : e)));
      report(e);
    } finally {
      state.running = null;
      updateButtons();
    }
    await refreshFiles().catch(report);
  }

  async function cancel() {
    if (!state.running || !state.running.id) return;
    await api('DELETE', 'api/executions/' + state.running.id);
  }

  // ---- files ----

  async function refreshFiles() {
    const list = $('files');
    if (!state.workspace) {
      list.replaceChildren(el('li', 'empty', 'no workspace'));
      return;
    }
    const doc = await api('GET', filesUrl('files'));
    const rows = [];
    for (const f of doc.files || []) {
      const li = el('li');
      li.dataset.path = f.path;
      li.appendChild(el('span', 'name', f.path + (f.type === 'directory' ? '/' : '')));
      if (f.type === 'file') {
        li.appendChild(el('span', 'size', formatBytes(f.size)));
        const b = el('button', 'download', 'Download');
        b.type = 'button';
        b.addEventListener('click', () => download(f.path).catch(report));
        li.appendChild(b);
      }
      rows.push(li);
    }
    if (doc.truncated) rows.push(el('li', 'empty', '(listing truncated)'));
    if (!rows.length) rows.push(el('li', 'empty', 'the workspace is empty'));
    list.replaceChildren(...rows);
  }

  // The key goes in a header, so a plain link cannot download: fetch the file, then save it
  // from a blob: URL.
  async function download(path) {
    const resp = await fetch(filesUrl('download', path), {
      headers: headers(), cache: 'no-store', credentials: 'omit',
    });
    if (!resp.ok) throw await failure(resp);
    const url = URL.createObjectURL(await resp.blob());
    const a = el('a');
    a.href = url;
    a.download = path.split('/').pop();
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    setStatus('downloaded ' + path);
  }

  async function upload() {
    const file = $('upload-file').files[0];
    if (!file) throw new Error('choose a file first');
    const path = $('upload-path').value.trim() || file.name;
    const resp = await fetch(filesUrl('upload', path), {
      method: 'PUT', headers: headers(), body: file, cache: 'no-store', credentials: 'omit',
    });
    if (!resp.ok) throw await failure(resp);
    const doc = await resp.json();
    setStatus('uploaded ' + doc.path + ' (' + formatBytes(doc.size) + ')');
    $('upload-file').value = '';
    $('upload-path').value = '';
    await refreshFiles();
  }

  // ---- wiring ----

  function wire() {
    $('key').value = state.key;
    $('connect').addEventListener('click', () => {
      state.key = $('key').value.trim();
      if (state.key) sessionStorage.setItem(KEY, state.key);
      else sessionStorage.removeItem(KEY);
      connect().catch(report);
    });
    $('key').addEventListener('keydown', (e) => {
      if (e.key === 'Enter') $('connect').click();
    });
    $('forget').addEventListener('click', () => {
      if (state.running) state.running.abort.abort();
      sessionStorage.removeItem(KEY);
      sessionStorage.removeItem(KERNEL);
      state.key = '';
      state.kernel = null;
      state.workspace = null;
      $('key').value = '';
      updateButtons();
      setStatus('key forgotten');
    });
    $('run').addEventListener('click', () => run());
    $('code').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        run();
      }
    });
    $('cancel').addEventListener('click', () => cancel().catch(report));
    $('interrupt').addEventListener('click', () => kernelAction('interrupt').catch(report));
    $('restart').addEventListener('click', () => kernelAction('restart').catch(report));
    $('new-kernel').addEventListener('click', () => newKernel().catch(report));
    $('clear').addEventListener('click', () => $('output').replaceChildren());
    $('refresh').addEventListener('click', () => refreshFiles().catch(report));
    $('upload').addEventListener('click', () => upload().catch(report));
    updateButtons();
    // a key from earlier in this tab's session: connect again
    if (state.key) connect().catch(report);
  }

  wire();
})();
