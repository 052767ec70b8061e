"""The E2B sandbox state machine against a model (docs/e2b.md): a seeded random walk.

Each step is one operation on the control or sandbox plane (create, delete, set timeout,
connect, get, list, health, execute, a wrong tenant's view, a wait for an expiry, the
sandbox's kernel shut down through kgw's own API, a pause, a connect that resumes); an explicit Python model predicts the
status and, where there is one, the answer (the listing's ids, endAt, metadata, envVars seen by
the code, the tokens a connect gives back). Around a sandbox's timeout (it takes effect at the
gateway's next tick, once a second; the lifetime counts from the create's answer) the model
allows both answers, and what the gateway says then settles it: a sandbox seen gone is never
seen again. A sandbox whose kernel was shut down through another face is gone at once. A
paused sandbox is kept (its timeout does not run), its plane answers 502 without it being
gone, and a connect resumes it with its lifetime (the connect's timeout, else its own) from
then.

KGW_E2B_MODEL_SEED (printed; random when unset) fixes the walk; KGW_E2B_MODEL_STEPS (default
80) and KGW_E2B_MODEL_SECONDS (default 60) bound it. A failure names the seed and the last
steps.
"""
import collections
import http.client
import json
import os
import random
import shutil
import tempfile
import time

import pytest

import conftest

pytestmark = [pytest.mark.kgw_only]

SEED = int(os.environ.get("KGW_E2B_MODEL_SEED") or random.SystemRandom().randrange(1 << 32))
STEPS = int(os.environ.get("KGW_E2B_MODEL_STEPS") or 80)
SECONDS = float(os.environ.get("KGW_E2B_MODEL_SECONDS") or 60)
MAX_LIVE = 4            # sandboxes alive at once (each is a kernel)
SURE_ALIVE_S = 0.5      # a sandbox whose end is this far ahead is certainly running
SURE_GONE_S = 3.5       # one whose end passed this long ago is certainly gone (1 s tick, ASan)
TIMEOUT_MAX = 86400     # docs/e2b.md: 1 to 86 400 seconds


class Sbx:
    """The model of one sandbox: its end lies between lo and hi (wall clock), as the request
    that set it was sent and answered: the gateway sets it in between."""

    def __init__(self, model, tenant, lo, hi, env, metadata):
        self.id = model["sandboxID"]
        self.tokens = (model["envdAccessToken"], model["trafficAccessToken"])
        self.tenant = tenant
        self.lo, self.hi = lo, hi
        self.env = env
        self.metadata = metadata
        self.gone = False
        self.paused = False
        self.life = None            # its lifetime in seconds (a resume starts it again)

    def state(self, now):
        """'alive', 'gone' or 'either' (near its end: the tick decides)."""
        if self.gone:
            return "gone"
        if self.paused:
            return "alive"
        if self.lo > now + SURE_ALIVE_S:
            return "alive"
        if self.hi < now - SURE_GONE_S:
            return "gone"
        return "either"


class Walk:
    def __init__(self, gw, keys, seed):
        self.gw = gw
        self.keys = keys                # tenant -> key
        self.rng = random.Random(seed)
        self.seed = seed
        self.sbxs = {}                  # id -> Sbx (gone ones stay: they must stay gone)
        self.history = collections.deque(maxlen=20)

    # ---- the wire

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=120)
        try:
            data = None if body is None else json.dumps(body).encode()
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
        finally:
            c.close()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw
        return r.status, payload

    def api(self, method, path, body=None, tenant="alice"):
        return self.request(method, "/e2b/api" + path, body, {"X-API-KEY": self.keys[tenant]})

    def sbx(self, s, method, path, body=None, token=None):
        return self.request(method, "/e2b/sbx" + path, body,
                            {"E2b-Sandbox-Id": s.id,
                             "X-Access-Token": s.tokens[0] if token is None else token})

    # ---- checking

    def fail(self, what):
        steps = "\n  ".join(self.history)
        pytest.fail(f"[KGW_E2B_MODEL_SEED={self.seed}] {what}\nlast steps:\n  {steps}")

    def expect(self, what, s, status, alive, gone):
        """Checks status against s's state: alive must be one of `alive`, gone one of `gone`;
        near its end either. Settles the model: returns True when the sandbox is running."""
        now = time.time()
        st = s.state(now)
        self.history.append(f"{what} [{st}] -> {status}")
        if status in alive and st in ("alive", "either"):
            return True
        if status in gone and st in ("gone", "either"):
            s.gone = True
            return False
        want = alive if st == "alive" else gone
        self.fail(f"{what}: {status}; the model says the sandbox is {st} "
                  f"(end in {s.lo - now:.1f}..{s.hi - now:.1f}s), expected {want}")

    def live(self, tenant=None):
        now = time.time()
        return [s for s in self.sbxs.values() if s.state(now) != "gone" and
                (tenant is None or s.tenant == tenant)]

    def pick(self, include_gone=True):
        pool = list(self.sbxs.values()) if include_gone else self.live()
        return self.rng.choice(sorted(pool, key=lambda s: s.id)) if pool else None

    # ---- operations

    def op_create(self):
        if len(self.live()) >= MAX_LIVE:
            return self.op_delete()
        tenant = self.rng.choice(["alice", "alice", "bob"])
        r = self.rng.random()
        body = {"templateID": self.rng.choice(["base", "code-interpreter-v1"])}
        if r < 0.15:   # refused, field by field (docs/e2b.md)
            bad = self.rng.choice([{"timeout": 0}, {"templateID": "nope"},
                                   {"allow_internet_access": True},
                                   {"autoPause": True, "autoPauseMemory": False},
                                   {"unknownField": 1}, {"timeout": TIMEOUT_MAX + 1}])
            body.update(bad)
            status, m = self.api("POST", "/v2/sandboxes", body, tenant)
            self.history.append(f"create {body} -> {status}")
            if status != 400:
                self.fail(f"create {body}: {status} {m}, expected 400")
            return
        timeout = self.rng.choice([1, 2, 3, 5, 30, 300, None])
        if timeout is not None:
            body["timeout"] = timeout
        env = {"MODEL": f"v{self.rng.randint(0, 999)}"} if self.rng.random() < 0.5 else {}
        if env:
            body["envVars"] = env
        meta = {"m": str(self.rng.randint(0, 9))} if self.rng.random() < 0.5 else {}
        if meta:
            body["metadata"] = meta
        path = self.rng.choice(["/v2/sandboxes", "/sandboxes"])
        t0 = time.time()
        status, m = self.api("POST", path, body, tenant)
        t1 = time.time()
        self.history.append(f"create {tenant} {body} -> {status} "
                            f"{m.get('sandboxID') if isinstance(m, dict) else m}")
        if status != 201:
            self.fail(f"create {body}: {status} {m}")
        if m["templateID"] != body["templateID"] or m["envdAccessToken"] == \
                m["trafficAccessToken"]:
            self.fail(f"create: answer {m}")
        # the lifetime counts from when it is ready: the create's answer (docs/e2b.md)
        s = Sbx(m, tenant, t0 + (timeout or 300), t1 + (timeout or 300), env, meta)
        s.life = timeout or 300
        if m["sandboxID"] in self.sbxs:
            self.fail(f"create: sandbox id {m['sandboxID']} given twice")
        self.sbxs[s.id] = s

    def op_delete(self):
        s = self.pick()
        if not s:
            return
        status, _ = self.api("DELETE", f"/sandboxes/{s.id}", tenant=s.tenant)
        self.expect(f"delete {s.id}", s, status, (204,), (404,))
        s.gone = True

    def op_timeout(self):
        s = self.pick()
        if not s:
            return
        t = self.rng.choice([1, 2, 5, 60, 600, 0, TIMEOUT_MAX + 1])
        t0 = time.time()
        status, body = self.api("POST", f"/sandboxes/{s.id}/timeout", {"timeout": t}, s.tenant)
        t1 = time.time()
        if t < 1 or t > TIMEOUT_MAX:   # the body is checked once the sandbox is found
            self.expect(f"timeout {s.id} {t}", s, status, (400,), (404,))
            return
        if self.expect(f"timeout {s.id} {t}", s, status, (204,), (404,)):
            s.lo, s.hi = t0 + t, t1 + t     # shorter or longer, from now
            s.life = t

    def op_connect(self):
        s = self.pick()
        if not s:
            return
        t = self.rng.choice([None, 1, 5, 600])
        v2 = self.rng.random() < 0.5
        path = f"/v2/sandboxes/{s.id}/connect" if v2 else f"/sandboxes/{s.id}/connect"
        t0 = time.time()
        status, m = self.api("POST", path, {"timeout": t} if t else {}, s.tenant)
        t1 = time.time()
        resumed = s.paused and not s.gone
        if self.expect(f"connect {s.id} {t}", s, status,
                       (201 if v2 or resumed else 200,), (404,)):
            if (m["envdAccessToken"], m["trafficAccessToken"]) != s.tokens:
                self.fail(f"connect {s.id}: other tokens {m}")
            if resumed:             # its lifetime again, from now
                s.paused = False
                s.life = t or s.life
                s.lo, s.hi = t0 + s.life, t1 + s.life
            elif t:                 # only ever extends
                s.lo, s.hi = max(s.lo, t0 + t), max(s.hi, t1 + t)

    def op_pause(self):
        s = self.pick()
        if not s:
            return
        status, m = self.api("POST", f"/sandboxes/{s.id}/pause", {}, s.tenant)
        if s.paused and not s.gone:  # already: 409 (the SDKs' "was already paused")
            self.expect(f"pause {s.id} (paused)", s, status, (409,), ())
        elif self.expect(f"pause {s.id}", s, status, (204,), (404,)):
            s.paused = True

    def plane(self, what, s, status, alive):
        """A sandbox-plane answer: 502 for a paused sandbox, which is not gone."""
        if s.paused and not s.gone:
            self.history.append(f"{what} [paused] -> {status}")
            if status != 502:
                self.fail(f"{what}: {status}, expected 502 for a paused sandbox")
            return False
        return self.expect(what, s, status, alive, (502,))

    def op_get(self):
        s = self.pick()
        if not s:
            return
        t0 = time.time()
        status, d = self.api("GET", f"/sandboxes/{s.id}", tenant=s.tenant)
        if self.expect(f"get {s.id}", s, status, (200,), (404,)):
            self.check_detail(s, d, t0)

    def check_detail(self, s, d, t0):
        from datetime import datetime
        end = datetime.fromisoformat(d["endAt"].replace("Z", "+00:00")).timestamp()
        if not (s.lo - 0.01 <= end <= s.hi + 0.01):
            self.fail(f"sandbox {s.id}: endAt {d['endAt']} ({end - t0:.2f}s ahead), the model "
                      f"says {s.lo - t0:.2f}..{s.hi - t0:.2f}s")
        state = "paused" if s.paused else "running"
        if d["metadata"] != s.metadata or d["sandboxID"] != s.id or d["state"] != state:
            self.fail(f"sandbox {s.id}: detail {d}, metadata {s.metadata}")

    def op_list(self):
        tenant = self.rng.choice(["alice", "bob"])
        path = self.rng.choice(["/v2/sandboxes", "/sandboxes"])
        t0 = time.time()
        status, items = self.api("GET", path, tenant=tenant)
        self.history.append(f"list {tenant} -> {status} {len(items or [])}")
        if status != 200:
            self.fail(f"list: {status} {items}")
        listed = {d["sandboxID"]: d for d in items}
        for sid in listed:
            if sid not in self.sbxs or self.sbxs[sid].tenant != tenant:
                self.fail(f"list of {tenant}: {sid}, which is not one of its sandboxes")
        for s in self.sbxs.values():
            if s.tenant != tenant:
                continue
            st = s.state(t0)
            if s.id in listed:
                self.expect(f"listed {s.id}", s, 200, (200,), ())
                self.check_detail(s, listed[s.id], t0)
            elif st == "alive":
                self.fail(f"list of {tenant}: {s.id} missing, the model says it runs")
            else:
                s.gone = True

    def op_health(self):
        s = self.pick()
        if not s:
            return
        status, _ = self.sbx(s, "GET", "/health", token="")
        self.plane(f"health {s.id}", s, status, (204,))

    def op_execute(self):
        s = self.pick()
        if not s:
            return
        wrong = self.rng.random() < 0.15
        status, raw = self.sbx(s, "POST", "/execute",
                               {"code": "import os\nprint(os.environ.get('MODEL', 'none'))"},
                               token="x" * 48 if wrong else None)
        if wrong:
            self.plane(f"execute {s.id} (a wrong token)", s, status, (401,))
            return
        if not self.plane(f"execute {s.id}", s, status, (200,)):
            return
        lines = [json.loads(l) for l in raw.decode().splitlines()] if isinstance(raw, bytes) \
            else [raw]
        types = [l["type"] for l in lines if l["type"] != "keepalive"]
        out = "".join(l.get("text", "") for l in lines if l["type"] == "stdout")
        if types[-1:] != ["end_of_execution"]:
            self.fail(f"execute {s.id}: {lines}")
        if "error" in types:
            # its end came during the execution: the kernel was shut down under it
            now = time.time()
            if s.lo > now + SURE_ALIVE_S:
                self.fail(f"execute {s.id}: an error although it runs: {lines}")
            return
        if out != s.env.get("MODEL", "none") + "\n":
            self.fail(f"execute {s.id}: stdout {out!r}, its envVars {s.env}")

    def op_other_tenant(self):
        """Another tenant's key: every route as for a sandbox that does not exist."""
        s = self.pick()
        if not s:
            return
        other = "bob" if s.tenant == "alice" else "alice"
        method, path, body = self.rng.choice([
            ("GET", f"/sandboxes/{s.id}", None), ("DELETE", f"/sandboxes/{s.id}", None),
            ("POST", f"/sandboxes/{s.id}/timeout", {"timeout": 5}),
            ("POST", f"/sandboxes/{s.id}/connect", {}),
            ("POST", f"/sandboxes/{s.id}/pause", {})])
        status, _ = self.api(method, path, body, other)
        self.history.append(f"{method} {path} as {other} -> {status}")
        if status != 404:
            self.fail(f"{method} {path} with {other}'s key: {status}, expected 404")

    def op_kernel_gone(self):
        """Its default kernel shut down through kgw's own API: the sandbox ends with it, at
        once for every request ("its kernel ended"; docs/e2b.md)."""
        live = [s for s in self.live() if s.state(time.time()) == "alive" and not s.paused]
        if not live:
            return
        s = self.rng.choice(sorted(live, key=lambda x: x.id))
        status, ks = self.request("GET", "/api/kernels",
                                  headers={"Authorization": f"token {self.keys[s.tenant]}"})
        theirs = sorted(k["id"] for k in ks)
        status, ctxs = self.sbx(s, "GET", "/contexts")
        if status != 200:
            self.fail(f"contexts of {s.id}: {status} {ctxs}")
        kid = ctxs[0]["id"]
        if kid not in theirs:
            self.fail(f"sandbox {s.id}: its kernel {kid} is not among its tenant's {theirs}")
        status, _ = self.request("DELETE", f"/api/kernels/{kid}",
                                 headers={"Authorization": f"token {self.keys[s.tenant]}"})
        self.history.append(f"DELETE kernel {kid} of {s.id} -> {status}")
        if status != 204:
            self.fail(f"DELETE /api/kernels/{kid}: {status}")
        s.gone = True       # the DELETE answers once the kernel has ended

    def op_wait(self):
        """Waits for the nearest end among the live sandboxes (if it is near)."""
        now = time.time()
        ends = [s.hi for s in self.live() if s.hi < now + 4 and not s.paused]
        if ends:
            pause = min(max(ends) + SURE_GONE_S - now, 6)
            self.history.append(f"wait {pause:.1f}s")
            time.sleep(max(pause, 0))

    OPS = [("op_create", 6), ("op_delete", 2), ("op_timeout", 3), ("op_connect", 3),
           ("op_get", 4), ("op_list", 3), ("op_health", 2), ("op_execute", 3),
           ("op_other_tenant", 1), ("op_kernel_gone", 1), ("op_wait", 2), ("op_pause", 2)]

    def run(self, steps, seconds):
        deadline = time.monotonic() + seconds
        names, weights = zip(*self.OPS)
        n = 0
        while n < steps and time.monotonic() < deadline:
            getattr(self, self.rng.choices(names, weights)[0])()
            n += 1
        return n


@pytest.fixture
def model_gw():
    d = tempfile.mkdtemp(prefix="kgw-e2bmodel-")
    path, keys = conftest.key_file(["alice", "bob"], directory=d)
    gw = conftest.start_gateway(["--key-file", path, "--pool", "python3=2"])
    yield gw, keys
    conftest.stop_gateway(gw)
    shutil.rmtree(d, ignore_errors=True)


def test_e2b_model(model_gw):
    gw, keys = model_gw
    print(f"\nKGW_E2B_MODEL_SEED={SEED} steps<={STEPS} seconds<={SECONDS}", flush=True)
    w = Walk(gw, keys, SEED)
    n = w.run(STEPS, SECONDS)
    print(f"{n} steps, {len(w.sbxs)} sandboxes", flush=True)
    assert gw.alive(), gw.log()[-3000:]
    # the end: every sandbox deleted, each tenant's listing empty, no kernel left
    for s in w.sbxs.values():
        status, _ = w.api("DELETE", f"/sandboxes/{s.id}", tenant=s.tenant)
        w.expect(f"final delete {s.id}", s, status, (204,), (404,))
    for tenant in keys:
        status, items = w.api("GET", "/v2/sandboxes", tenant=tenant)
        assert (status, items) == (200, []), (tenant, status, items)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = [k for t in keys for k in w.request(
            "GET", "/api/kernels", headers={"Authorization": f"token {keys[t]}"})[1]]
        if not left:
            break
        time.sleep(0.5)
    assert not left, left
