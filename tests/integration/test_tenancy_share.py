"""Issue 29: one tenant cannot evict, starve or stall another. Each test plays one attack by
tenant A against the gateway's shared tables and slots (docs/security.md, "Shares between
tenants"), with real kernels, and checks what tenant B still gets."""
import http.client
import json
import time

import pytest

from conftest import key_file

pytestmark = pytest.mark.kgw_only


def conn(gw, timeout=60):
    return http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)


def hdrs(key, extra=None):
    h = {"Authorization": f"token {key}", "Content-Type": "application/json"}
    h.update(extra or {})
    return h


def call(gw, method, path, key, body=None, extra=None):
    c = conn(gw)
    c.request(method, path, body=None if body is None else json.dumps(body).encode(),
              headers=hdrs(key, extra))
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None), r.headers


def execute(gw, path, body, key, extra=None):
    """POSTs an execution and reads its whole NDJSON stream: (status, events or error, headers)."""
    c = conn(gw)
    c.request("POST", path, body=json.dumps(body).encode(), headers=hdrs(key, extra))
    r = c.getresponse()
    try:
        data = r.read()
        if r.status >= 300:
            return r.status, json.loads(data), r.headers
        return r.status, [json.loads(x) for x in data.splitlines() if x], r.headers
    finally:
        c.close()


def start_kernel(gw, key):
    status, model, _ = call(gw, "POST", "/api/kernels", key, {})
    assert status == 201, model
    return model["id"]


def queue_and_cancel(gw, kid, key, extra=None):
    """Queues {"code": "1"} behind the kernel's running execution and cancels it: one
    execution held, none run. Returns (status, headers)."""
    c = conn(gw)
    c.request("POST", f"/api/kernels/{kid}/execute", body=b'{"code": "1"}',
              headers=hdrs(key, extra))
    r = c.getresponse()
    if r.status != 201:
        r.read()
        c.close()
        return r.status, r.headers
    eid = json.loads(r.readline())["execution_id"]
    assert call(gw, "DELETE", f"/api/executions/{eid}", key)[0] == 200
    r.read()
    c.close()
    return 201, r.headers


def test_execution_flood_evicts_only_the_flooder(gateway_factory, tmp_path):
    """A queues and cancels executions far beyond the table (--max-executions); B's keyed
    execution stays found, and its retry does not run the code again. Fails on the old code
    (one table for all tenants, the oldest finished execution of anyone dropped first)."""
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}", "--max-executions=30",
                         "--max-executions-per-tenant=20", "--execution-retention=600")
    a, b = keys["alice"], keys["bob"]
    kb = start_kernel(gw, b)
    body = {"code": "with open('ran.txt', 'a') as f:\n    f.write('x')\nprint('ran')"}
    key = {"Idempotency-Key": "bob-once"}
    status, ev, h = execute(gw, f"/api/kernels/{kb}/execute", body, b, key)
    assert status == 201 and ev[-1]["status"] == "ok", ev
    eid = ev[0]["execution_id"]
    # B's other, unkeyed executions: the table holds them too
    for _ in range(5):
        assert execute(gw, f"/api/kernels/{kb}/execute", {"code": "2"}, b)[0] == 201

    ka = start_kernel(gw, a)
    c = conn(gw)  # keeps A's kernel busy: what A queues waits behind it
    c.request("POST", f"/api/kernels/{ka}/execute", body=b'{"code": "import time; '
              b'time.sleep(60)"}', headers=hdrs(a))
    busy = c.getresponse()
    busy_id = json.loads(busy.readline())["execution_id"]
    for i in range(60):
        status, _ = queue_and_cancel(gw, ka, a)
        assert status == 201, (i, status)
    # A's own cancelled executions went, none of B's
    assert call(gw, "GET", f"/api/executions/{eid}", b)[0] == 200
    status, ev2, h2 = execute(gw, f"/api/kernels/{kb}/execute", body, b, key)
    assert status == 200 and ev2 == ev and h2["Location"] == h["Location"], (status, ev2)
    status, ev3, _ = execute(gw, f"/api/kernels/{kb}/execute",
                             {"code": "print(open('ran.txt').read())"}, b)
    assert [e["text"] for e in ev3 if e["type"] == "stream"] == ["x\n"], ev3

    # A's keyed executions are held for their retention: at its share A is refused
    refused = None
    for i in range(25):
        status, hh = queue_and_cancel(gw, ka, a, {"Idempotency-Key": f"a-{i}"})
        if status != 201:
            refused = (i, status, hh)
            break
    assert refused and refused[1] == 429, refused
    assert 1 <= int(refused[2]["Retry-After"]) <= 600, refused
    # ... and B is not
    assert execute(gw, f"/api/kernels/{kb}/execute", {"code": "3"}, b)[0] == 201
    call(gw, "DELETE", f"/api/executions/{busy_id}", a)
    busy.read()
    c.close()


def test_key_is_bound_to_its_route(gateway):
    """A key reused by the same tenant on another kernel, or on a one-shot, is 422 and runs
    nothing. Fails on the old code (it answered the first kernel's execution)."""
    gw, tok = gateway, gateway.token
    k1, k2 = start_kernel(gw, tok), start_kernel(gw, tok)
    try:
        body = {"code": "print('once')"}
        key = {"Idempotency-Key": "route-bound"}
        status, ev, _ = execute(gw, f"/api/kernels/{k1}/execute", body, tok, key)
        assert status == 201, ev
        for path in (f"/api/kernels/{k2}/execute", "/api/execute"):
            status, err, _ = execute(gw, path, body, tok, key)
            assert status == 422 and "route" in err["message"], (path, status, err)
        # the same route still answers the first one
        status, ev2, _ = execute(gw, f"/api/kernels/{k1}/execute", body, tok, key)
        assert status == 200 and ev2 == ev
    finally:
        call(gw, "DELETE", f"/api/kernels/{k1}", tok)
        call(gw, "DELETE", f"/api/kernels/{k2}", tok)
