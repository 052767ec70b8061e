"""Workspace files over HTTP (upload, download, check_file, listing, delete) and the instance
endpoints (self_identify, check_liveness, check_ready, openapi.json), against the real gateway
with real sandboxed kernels: what a client sends reaches the kernel's /mnt/data and back byte
for byte, and nothing a kernel plants in its workspace (symlinks, fifos, hard links) lets a
client read or write outside it."""
import hashlib
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse

import pytest

import sbxutil as S
from conftest import key_file
from sbxutil import kcall

MiB = 1024 * 1024
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOUNDARY = "kgwBoundary7MA4YWxkTrZu0gW"


# ---- helpers ----

def call(gw, method, path, body=None, headers=None, auth=True, timeout=120, conn=None, key=None):
    """One request with the raw path (no quoting); returns (status, headers, body bytes)."""
    h = {"Authorization": f"token {key or gw.token}"} if auth else {}
    h.update(headers or {})
    c = conn or http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        if conn is None:
            c.close()


def jbody(data):
    return json.loads(data) if data else None


def q(path):
    return urllib.parse.quote(path, safe="/")


def put(gw, ws, path, data, **kw):
    return call(gw, "PUT", f"/upload/{q(path)}?workspace={ws}", body=data,
                headers={"Content-Length": str(len(data))}, **kw)


def multipart(parts, boundary=BOUNDARY):
    """parts: (name, filename or None, bytes) in order."""
    out = []
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out.append(f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode())
        if filename:
            out.append(b"Content-Type: application/octet-stream\r\n")
        out.append(b"\r\n" + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out)


def post_form(gw, ws, parts, boundary=BOUNDARY, **kw):
    body = multipart(parts, boundary)
    return call(gw, "POST", f"/upload?workspace={ws}", body=body,
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                         "Content-Length": str(len(body))}, **kw)


def get(gw, ws, what, path="", **kw):
    return call(gw, "GET", f"/{what}{'/' + q(path) if path else ''}?workspace={ws}", **kw)


def check(gw, ws, path):
    status, _, body = get(gw, ws, "check_file", path)
    assert status == 200, body
    return jbody(body)


def listing(gw, ws):
    status, _, body = get(gw, ws, "files")
    assert status == 200, body
    return {f["path"]: f for f in jbody(body)["files"]}


def sha(data):
    return hashlib.sha256(data).hexdigest()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.02)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()


@pytest.fixture(scope="module")
def gw(gateway):
    S.assert_sandboxed_gateway(gateway)
    return gateway


@pytest.fixture
def kw(gw):
    """A kernel and its workspace id."""
    status, model, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201, model
    yield model["id"], model["workspace"]
    gw.delete_kernel(model["id"])


def no_wrapper():
    return not os.environ.get("KGW_WRAPPER")


# ---- upload ----

def test_put_upload_reaches_the_kernel_which_owns_it(gw, kw):
    kid, ws = kw
    data = os.urandom(MiB + 123)
    status, hdrs, body = put(gw, ws, "in/data.bin", data)
    assert status == 201, body
    assert jbody(body) == {"path": "in/data.bin", "size": len(data)}
    assert hdrs["Content-Type"] == "application/json"
    r = kcall(gw, kid, """
import hashlib, os
p = '/mnt/data/in/data.bin'
R['sha'] = hashlib.sha256(open(p, 'rb').read()).hexdigest()
R['uid'] = os.stat(p).st_uid
R['dir_uid'] = os.stat('/mnt/data/in').st_uid
with open(p, 'ab') as f:          # the kernel may change what was uploaded
    f.write(b'more')
open('/mnt/data/in/new', 'w').write('x')   # and write in a directory the upload made
os.unlink('/mnt/data/in/new')
R['size'] = os.path.getsize(p)
""")
    assert r["sha"] == sha(data)
    assert r["uid"] == 1000 and r["dir_uid"] == 1000
    assert r["size"] == len(data) + 4


def test_put_replaces_a_file_and_accepts_empty_files(gw, kw):
    kid, ws = kw
    assert put(gw, ws, "f.txt", b"first version")[0] == 201
    assert put(gw, ws, "f.txt", b"second")[0] == 201
    assert put(gw, ws, "empty", b"")[0] == 201
    r = kcall(gw, kid, "import os; R['f'] = open('/mnt/data/f.txt').read(); "
                       "R['e'] = os.path.getsize('/mnt/data/empty'); "
                       "R['ls'] = sorted(os.listdir('/mnt/data'))")
    assert r == {"f": "second", "e": 0, "ls": ["empty", "f.txt"]}  # no temporary names left


@pytest.mark.parametrize("path_first", [True, False])
def test_multipart_upload_with_path_before_or_after_the_file(gw, kw, path_first):
    kid, ws = kw
    # content that keeps looking like the start of a boundary, across parse buffer edges
    data = b"".join([os.urandom(1000), b"\r\n--kgwBoundary7MA4", os.urandom(3000),
                     b"\r\n--", b"\r\n", b"\r\n-", (b"\r\n--" + BOUNDARY[:-1].encode()) * 50,
                     os.urandom(70000), b"--" + BOUNDARY.encode() + b"x"])
    fpart = ("file", "ignored-name.bin", data)
    ppart = ("path", None, "up/form.bin".encode())
    extra = ("comment", None, b"unrelated field")
    parts = [ppart, extra, fpart] if path_first else [fpart, extra, ppart]
    status, _, body = post_form(gw, ws, parts)
    assert status == 201, body
    assert jbody(body) == {"path": "up/form.bin", "size": len(data)}
    r = kcall(gw, kid, "import hashlib; R['sha'] = hashlib.sha256("
                       "open('/mnt/data/up/form.bin', 'rb').read()).hexdigest()")
    assert r["sha"] == sha(data)


def test_multipart_without_path_uses_the_filename(gw, kw):
    kid, ws = kw
    status, _, body = post_form(gw, ws, [("file", "report.csv", b"a,b\n1,2\n")])
    assert status == 201, body
    assert jbody(body) == {"path": "report.csv", "size": 8}


@pytest.mark.parametrize("parts,ctype,want", [
    ([("path", None, b"x")], None, 400),                                  # no file part
    ([("file", "a", b"1"), ("file", "b", b"2")], None, 400),             # two files
    ([("path", None, b"a"), ("path", None, b"b"), ("file", "f", b"1")], None, 400),
    ([("path", None, b"x" * 2000), ("file", "f", b"1")], None, 400),     # path too long
    ([("file", "f", b"1")], "application/octet-stream", 415),
    ([("file", "f", b"1")], "multipart/form-data", 415),                  # no boundary
])
def test_bad_multipart_is_refused(gw, kw, parts, ctype, want):
    kid, ws = kw
    body = multipart(parts)
    status, hdrs, resp = call(gw, "POST", f"/upload?workspace={ws}", body=body, headers={
        "Content-Type": ctype or f"multipart/form-data; boundary={BOUNDARY}",
        "Content-Length": str(len(body))})
    assert status == want, resp
    assert hdrs["Content-Type"] == "application/json" and jbody(resp)["message"]
    assert listing(gw, ws) == {}


def test_repeated_path_fields_are_bounded(gw, kw):
    """Thousands of tiny "path" fields: refused, and the gateway does not grow."""
    kid, ws = kw
    parts = [("path", None, b"p")] * 20000 + [("file", "f", b"1")]
    status, _, body = post_form(gw, ws, parts)
    assert status == 400, body
    assert listing(gw, ws) == {}


def test_upload_needs_a_content_length(gw, kw):
    kid, ws = kw
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        c.putrequest("PUT", f"/upload/x?workspace={ws}")
        c.putheader("Authorization", f"token {gw.token}")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        c.send(b"1\r\nx\r\n0\r\n\r\n")
        r = c.getresponse()
        assert r.status == 411, r.read()
    finally:
        c.close()


def test_upload_over_the_limit_is_refused_before_its_body(gateway_factory):
    gw = gateway_factory("--max-upload-bytes", str(MiB))
    status, model, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201
    ws = model["workspace"]
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:  # headers only: the answer comes without the body being sent
        c.putrequest("PUT", f"/upload/big?workspace={ws}")
        c.putheader("Authorization", f"token {gw.token}")
        c.putheader("Content-Length", str(2 * MiB))
        c.endheaders()
        r = c.getresponse()
        assert r.status == 413
        assert "limit" in json.loads(r.read())["message"]
    finally:
        c.close()
    assert put(gw, ws, "small", b"x" * 1000)[0] == 201
    assert listing(gw, ws).keys() == {"small"}


# ---- a full workspace ----

def test_full_workspace_gives_a_clear_error_and_keeps_nothing(gw):
    status, model, _ = gw.request("POST", "/api/kernels", {"limits": {"workspace": 4 * MiB}})
    assert status == 201, model
    kid, ws = model["id"], model["workspace"]
    try:
        kcall(gw, kid, "open('/mnt/data/keep', 'wb').write(b'k' * (2 * 1024 * 1024)); R['ok']=1")
        before = kcall(gw, kid, "import os; s = os.statvfs('/mnt/data'); "
                                "R['free'] = s.f_bavail * s.f_frsize")["free"]
        # known too big from its Content-Length: answered before the body (and on a connection
        # that stays usable)
        c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
        try:
            status, hdrs, body = put(gw, ws, "too-big", b"x" * (3 * MiB), conn=c)
            assert status == 413, body
            msg = jbody(body)["message"]
            assert "full" in msg and "/run" not in msg and "/tmp" not in msg
            assert call(gw, "GET", f"/check_file/keep?workspace={ws}", conn=c)[0] == 200
        finally:
            c.close()
        # a multipart body that passes the first check, then runs out of space while written
        status, _, body = post_form(gw, ws, [("path", None, b"d/partial"),
                                             ("file", "f", os.urandom(before + 30000))])
        assert status == 413, body
        assert "full" in jbody(body)["message"]
        assert set(listing(gw, ws)) == {"keep"}
        after = kcall(gw, kid, "import os; s = os.statvfs('/mnt/data'); "
                               "R['free'] = s.f_bavail * s.f_frsize; "
                               "R['ls'] = os.listdir('/mnt/data')")
        assert after["ls"] == ["keep"] and after["free"] == before
        # and what fits still goes in
        assert put(gw, ws, "fits", b"y" * MiB)[0] == 201
    finally:
        gw.delete_kernel(kid)


# ---- download and check_file ----

def test_kernel_writes_a_file_and_the_download_is_byte_exact(gw, kw):
    kid, ws = kw
    r = kcall(gw, kid, """
import hashlib, os
os.makedirs('/mnt/data/out', exist_ok=True)
d = os.urandom(3 * 1024 * 1024 + 17)
open('/mnt/data/out/result.bin', 'wb').write(d)
R['sha'] = hashlib.sha256(d).hexdigest()
""")
    info = check(gw, ws, "out/result.bin")
    assert info == {"exists": True, "too_large": False, "size": 3 * MiB + 17}
    status, hdrs, body = get(gw, ws, "download", "out/result.bin")
    assert status == 200
    assert int(hdrs["Content-Length"]) == info["size"] == len(body)
    assert sha(body) == r["sha"]
    assert hdrs["Content-Type"] == "application/octet-stream"
    assert hdrs["Content-Disposition"] == "attachment; filename*=UTF-8''result.bin"
    assert hdrs["X-Content-Type-Options"] == "nosniff"


def test_names_with_spaces_percent_and_unicode(gw, kw):
    kid, ws = kw
    name = "données/ré sumé 100%;#?.txt"
    status, _, body = put(gw, ws, name, "é".encode() * 10)
    assert status == 201, body
    assert jbody(body)["path"] == name
    r = kcall(gw, kid, f"R['t'] = open({'/mnt/data/' + name!r}, encoding='utf-8').read()")
    assert r["t"] == "é" * 10
    assert check(gw, ws, name)["size"] == 20
    status, hdrs, body = get(gw, ws, "download", name)
    assert status == 200 and body == "é".encode() * 10
    disp = hdrs["Content-Disposition"]
    prefix = "attachment; filename*=UTF-8''"
    assert disp.startswith(prefix)
    value = disp[len(prefix):]
    assert re.fullmatch(r"[A-Za-z0-9!#$&+.^_`|~%-]+", value)  # RFC 8187 attr-chars
    assert urllib.parse.unquote(value, encoding="utf-8") == "ré sumé 100%;#?.txt"
    assert name in listing(gw, ws)


def test_check_file_of_missing_and_non_regular_files(gw, kw):
    kid, ws = kw
    kcall(gw, kid, "import os; os.mkdir('/mnt/data/dir'); R['ok'] = 1")
    for p in ("nothing", "dir", "nothing/below"):
        assert check(gw, ws, p) == {"exists": False, "too_large": False, "size": 0}, p
    assert get(gw, ws, "download", "nothing")[0] == 404
    assert get(gw, ws, "download", "dir")[0] == 404


def test_too_large_files_are_flagged_and_not_served(gateway_factory):
    gw = gateway_factory("--max-download-bytes", "1000")
    status, model, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201
    kid, ws = model["id"], model["workspace"]
    kcall(gw, kid, "open('/mnt/data/big', 'wb').write(b'b' * 1001); "
                   "open('/mnt/data/ok', 'wb').write(b'o' * 1000); R['ok'] = 1")
    assert check(gw, ws, "big") == {"exists": True, "too_large": True, "size": 1001}
    assert check(gw, ws, "ok") == {"exists": True, "too_large": False, "size": 1000}
    status, _, body = get(gw, ws, "download", "big")
    assert status == 413 and "limit" in jbody(body)["message"]
    assert get(gw, ws, "download", "ok")[2] == b"o" * 1000


@pytest.mark.skipif(not no_wrapper(), reason="RSS of a wrapped gateway is the wrapper's")
def test_large_transfers_stream_with_small_gateway_memory(gw, kw):
    kid, ws = kw
    size = 160 * MiB
    r = kcall(gw, kid, f"""
import hashlib, os
h = hashlib.sha256()
block = os.urandom(1024 * 1024)
with open('/mnt/data/huge.bin', 'wb') as f:
    for i in range({size // MiB}):
        b = block[i:] + block[:i]
        f.write(b)
        h.update(b)
R['sha'] = h.hexdigest()
""", timeout=120)
    pid = gw.proc.pid
    base = rss_kib(pid)
    with RssSampler(pid) as s:
        c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=120)
        try:
            c.request("GET", f"/download/huge.bin?workspace={ws}",
                      headers={"Authorization": f"token {gw.token}"})
            resp = c.getresponse()
            assert resp.status == 200
            assert int(resp.headers["Content-Length"]) == size
            h, n = hashlib.sha256(), 0
            while True:
                chunk = resp.read(MiB)
                if not chunk:
                    break
                h.update(chunk)
                n += len(chunk)
        finally:
            c.close()
    assert n == size and h.hexdigest() == r["sha"]
    assert (s.peak - base) < 16 * 1024, f"gateway RSS grew from {base} KiB to {s.peak} KiB"
    # and the other way: a large PUT streamed from a generator
    assert get(gw, ws, "files")[0] == 200
    call(gw, "DELETE", f"/files/huge.bin?workspace={ws}")

    def gen():
        for i in range(size // MiB):
            yield bytes([i % 251]) * MiB
    base = rss_kib(pid)
    with RssSampler(pid) as s:
        status, _, body = call(gw, "PUT", f"/upload/up.bin?workspace={ws}", body=gen(),
                               headers={"Content-Length": str(size)})
    assert status == 201, body
    assert (s.peak - base) < 16 * 1024, f"gateway RSS grew from {base} KiB to {s.peak} KiB"
    assert check(gw, ws, "up.bin")["size"] == size


def start_download(gw, ws, path):
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    c.request("GET", f"/download/{q(path)}?workspace={ws}",
              headers={"Authorization": f"token {gw.token}"})
    r = c.getresponse()
    assert r.status == 200
    return c, r


def test_a_transfer_holds_its_workspace(gateway_factory):
    gw = gateway_factory("--workspace-grace=0")
    status, model, _ = gw.request("POST", "/api/kernels", {})
    kid, ws = model["id"], model["workspace"]
    r = kcall(gw, kid, """
import hashlib, os
d = os.urandom(1024 * 1024) * 48
open('/mnt/data/big', 'wb').write(d)
R['sha'] = hashlib.sha256(d).hexdigest()
""")
    c, resp = start_download(gw, ws, "big")
    try:
        head = resp.read(MiB)
        # the last kernel goes: with no grace the workspace would go too, but it is held
        assert gw.delete_kernel(kid) == 204
        rest = resp.read()
    finally:
        c.close()
    assert sha(head + rest) == r["sha"]
    # released at the end of the transfer, and then removed
    S.wait_for(lambda: get(gw, ws, "files")[0] == 404, 10, what="workspace removal")


def test_a_file_shrinking_during_its_download_cuts_the_connection(gw, kw):
    kid, ws = kw
    kcall(gw, kid, "open('/mnt/data/shrinks', 'wb').write(b'z' * (64 * 1024 * 1024)); R['ok']=1")
    c, resp = start_download(gw, ws, "shrinks")
    try:
        assert resp.read(MiB) == b"z" * MiB
        kcall(gw, kid, "open('/mnt/data/shrinks', 'wb').close(); R['ok'] = 1")
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
    finally:
        c.close()
    assert check(gw, ws, "shrinks")["size"] == 0
    assert gw.alive()


# ---- what a kernel plants ----

PLANT = """
import os
os.chdir('/mnt/data')
os.mkdir('sub')
open('sub/inner.txt', 'w').write('inner')
os.symlink('/etc/passwd', 'passwd-link')
os.symlink('/', 'root-link')
os.symlink('sub', 'sub-link')
os.symlink('/etc', 'sub/etc-link')
os.mkfifo('fifo')
try:
    os.link('/etc/hostname', 'hard')
    R['hard'] = 'made'
except OSError as e:
    R['hard'] = e.errno
os.link('sub/inner.txt', 'hard-inside')
R['ok'] = 1
"""


def test_planted_links_and_fifos_cannot_reach_outside(gw, kw):
    kid, ws = kw
    r = kcall(gw, kid, PLANT)
    assert r["hard"] == 18  # EXDEV: the workspace is its own file system
    with open("/etc/passwd", "rb") as f:
        host_passwd = f.read()
    reads = ["passwd-link", "root-link/etc/passwd", "sub-link/inner.txt", "sub/etc-link/passwd",
             "root-link/etc/hostname"]
    for p in reads:
        status, _, body = get(gw, ws, "download", p)
        assert status in (404, 409), (p, status, body)
        assert b"root:" not in body
        assert check(gw, ws, p)["exists"] is False, p
    # a fifo neither blocks the gateway nor is served
    t0 = time.monotonic()
    status, _, body = get(gw, ws, "download", "fifo", timeout=10)
    assert status == 404 and time.monotonic() - t0 < 5
    assert check(gw, ws, "fifo")["exists"] is False
    # a hard link inside the workspace is just another regular file
    assert get(gw, ws, "download", "hard-inside")[2] == b"inner"
    # writes through links are refused; nothing appears outside
    for p in ("root-link/tmp/kgw-escape", "sub/etc-link/kgw-escape", "sub-link/x"):
        status, _, body = put(gw, ws, p, b"escape")
        assert status in (404, 409), (p, status, body)
    assert not os.path.exists("/tmp/kgw-escape") and not os.path.exists("/etc/kgw-escape")
    # an upload over a symlink replaces the link itself, never its target
    assert put(gw, ws, "passwd-link", b"mine")[0] == 201
    with open("/etc/passwd", "rb") as f:
        assert f.read() == host_passwd
    r = kcall(gw, kid, "import os; R['link'] = os.path.islink('/mnt/data/passwd-link'); "
                       "R['t'] = open('/mnt/data/passwd-link').read()")
    assert r == {"link": False, "t": "mine"}
    # the listing shows links as links and does not descend through them
    ls = listing(gw, ws)
    assert ls["root-link"]["type"] == "symlink" and ls["fifo"]["type"] == "other"
    assert ls["sub"]["type"] == "directory" and ls["sub/inner.txt"]["size"] == 5
    assert not any(p.startswith(("root-link/", "sub-link/", "sub/etc-link/")) for p in ls)
    # deleting a link removes the link
    assert call(gw, "DELETE", f"/files/root-link?workspace={ws}")[0] == 204
    assert os.path.exists("/etc/passwd")


@pytest.mark.parametrize("raw", [
    "/download/../../../../etc/passwd",
    "/download/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/download/..%2f..%2f..%2fetc%2fpasswd",
    "/download/%2fetc%2fpasswd",
    "/download//etc/passwd",
    "/download/sub/..%2f..%2f..%2f..%2fetc/passwd",
    "/download/%00",
    "/download/a%00/../../etc/passwd",
    "/check_file/..%2f..%2fetc%2fpasswd",
    "/download/%5c..%5c..%5cetc%5cpasswd",
])
def test_encoded_traversal_is_refused(gw, kw, raw):
    kid, ws = kw
    try:
        status, hdrs, body = call(gw, "GET", f"{raw}?workspace={ws}")
    except http.client.RemoteDisconnected:
        return  # libwebsockets drops some malformed request lines (a NUL) outright
    assert status in (400, 404) or (raw.startswith("/check_file") and
                                    jbody(body)["exists"] is False), (status, body)
    assert b"root:" not in body
    if status != 200:
        assert hdrs["Content-Type"] == "application/json" and jbody(body)["message"]


@pytest.mark.parametrize("path", ["/etc/evil", "../evil", "a/../../evil", "a//b", "./a", "a/",
                                  "a/./b", "a\x00b", "a\nb", "x" * 256, "/".join(["d"] * 33),
                                  "a/" * 520 + "b", "\udcff".encode("utf-8", "surrogatepass")])
def test_bad_upload_paths_are_400(gw, kw, path):
    kid, ws = kw
    raw = path if isinstance(path, bytes) else path.encode("utf-8", "surrogatepass")
    status, _, body = post_form(gw, ws, [("path", None, raw), ("file", "f", b"x")])
    assert status == 400, (path, body)
    assert "path" in jbody(body)["message"]
    assert listing(gw, ws) == {}


def test_parent_that_is_a_file_or_target_that_is_a_directory(gw, kw):
    kid, ws = kw
    assert put(gw, ws, "f", b"1")[0] == 201
    assert put(gw, ws, "f/below", b"2")[0] == 409
    assert put(gw, ws, "d/x", b"3")[0] == 201
    assert put(gw, ws, "d", b"4")[0] == 409


# ---- workspace scoping, keys ----

def test_unknown_or_missing_workspace(gw, kw):
    kid, ws = kw
    for wsq in ("00000000-0000-0000-0000-000000000000", "nope", "../" + ws, ws + "x"):
        for method, path in (("GET", "/files"), ("GET", "/check_file/a"), ("GET", "/download/a"),
                             ("DELETE", "/files/a")):
            status, _, body = call(gw, method, f"{path}?workspace={urllib.parse.quote(wsq)}")
            assert status == 404, (method, path, wsq, body)
            assert "workspace" in jbody(body)["message"]
        assert put(gw, urllib.parse.quote(wsq), "a", b"x")[0] == 404
    for method, path in (("GET", "/files"), ("GET", "/download/a"), ("DELETE", "/files/a")):
        status, _, body = call(gw, method, path)
        assert status == 400 and "workspace" in jbody(body)["message"]


def test_file_endpoints_need_the_key(gw, kw):
    kid, ws = kw
    assert put(gw, ws, "secret", b"s")[0] == 201
    for method, path in (("GET", "/files"), ("GET", "/check_file/secret"),
                         ("GET", "/download/secret"), ("DELETE", "/files/secret"),
                         ("PUT", "/upload/other"), ("POST", "/upload"),
                         ("GET", "/self_identify"), ("GET", "/openapi.json")):
        status, _, body = call(gw, method, f"{path}?workspace={ws}", auth=False, body=b"x")
        assert status == 401, (method, path, body)
    assert call(gw, "GET", f"/download/secret?workspace={ws}&token=wrong", auth=False)[0] == 401
    assert set(listing(gw, ws)) == {"secret"}


def test_another_tenants_workspace_looks_missing(gateway_factory, tmp_path):
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}")
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    c.request("POST", "/api/kernels", body=b"{}", headers={"Authorization": f"token {keys['alice']}"})
    r = c.getresponse()
    model = json.loads(r.read())
    c.close()
    assert r.status == 201, model
    ws = model["workspace"]
    missing = "00000000-0000-0000-0000-000000000000"
    assert put(gw, ws, "mine.txt", b"alice's", key=keys["alice"])[0] == 201
    for who in ("bob", None):  # None: the --api-key of the default tenant
        k = keys.get(who)
        for method, path in (("GET", "/files"), ("GET", "/check_file/mine.txt"),
                             ("GET", "/download/mine.txt"), ("DELETE", "/files/mine.txt")):
            status, _, body = call(gw, method, f"{path}?workspace={ws}", key=k)
            status2, _, body2 = call(gw, method, f"{path}?workspace={missing}", key=k)
            assert status == status2 == 404, (who, method, path, body)
            assert jbody(body)["message"].replace(ws, missing) == jbody(body2)["message"]
        assert put(gw, ws, "theirs.txt", b"bob's", key=k)[0] == 404
        status, _, body = post_form(gw, ws, [("file", "f", b"x")], key=k)
        assert status == 404, body
    assert set(listing_as(gw, ws, keys["alice"])) == {"mine.txt"}
    assert get(gw, ws, "download", "mine.txt", key=keys["alice"])[2] == b"alice's"


def test_transfers_are_audited(gateway_factory, tmp_path):
    log = tmp_path / "audit.jsonl"
    gw = gateway_factory(f"--audit-log={log}")
    status, model, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201
    ws = model["workspace"]
    assert put(gw, ws, "a/b.txt", b"12345")[0] == 201
    assert get(gw, ws, "download", "a/b.txt")[0] == 200
    assert post_form(gw, ws, [("path", None, b"../x"), ("file", "f", b"1")])[0] == 400
    assert call(gw, "DELETE", f"/files/a/b.txt?workspace={ws}")[0] == 204
    events = [json.loads(line) for line in log.read_text().splitlines()]
    files = [e for e in events if e["event"].startswith("file_")]
    assert [(e["event"], e["path"], e["size"], e["result"]) for e in files] == [
        ("file_upload", "a/b.txt", 5, "ok"), ("file_download", "a/b.txt", 5, "ok"),
        ("file_upload", "", 1, files[2]["result"]), ("file_delete", "a/b.txt", 0, "ok")]
    assert "invalid path" in files[2]["result"]
    assert all(e["workspace"] == ws and e["tenant"] == "default" and e["addr"] for e in files)


def listing_as(gw, ws, key):
    status, _, body = call(gw, "GET", f"/files?workspace={ws}", key=key)
    assert status == 200, body
    return {f["path"]: f for f in jbody(body)["files"]}


def test_workspace_outlives_kernel_for_downloads(gw):
    status, model, _ = gw.request("POST", "/api/kernels", {})
    kid, ws = model["id"], model["workspace"]
    kcall(gw, kid, "open('/mnt/data/result', 'w').write('done'); R['ok'] = 1")
    assert gw.delete_kernel(kid) == 204
    assert get(gw, ws, "download", "result")[2] == b"done"


# ---- listing and delete ----

def test_listing(gw, kw):
    kid, ws = kw
    kcall(gw, kid, """
import os
os.makedirs('/mnt/data/a/b/c')
open('/mnt/data/a/b/c/deep.txt', 'w').write('12345')
open('/mnt/data/top', 'w').write('')
R['ok'] = 1
""")
    status, _, body = get(gw, ws, "files")
    doc = jbody(body)
    assert doc["workspace"] == ws and doc["truncated"] is False
    ls = {f["path"]: f for f in doc["files"]}
    assert set(ls) == {"a", "a/b", "a/b/c", "a/b/c/deep.txt", "top"}
    assert ls["a/b/c/deep.txt"]["size"] == 5 and ls["a/b/c/deep.txt"]["type"] == "file"
    assert ls["a/b"]["type"] == "directory"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ls["top"]["last_modified"])


def test_listing_is_bounded(gw, kw):
    kid, ws = kw
    kcall(gw, kid, """
import os
os.chdir('/mnt/data')
os.makedirs('/'.join(['d'] * 40))
os.mkdir('many')
for i in range(10050):
    open(f'many/{i}', 'w').close()
os.mkdir('odd')
open(b'odd/\\xff-not-utf8', 'w').close()
open('odd/ctl\\x01', 'w').close()
open('odd/fine', 'w').close()
R['ok'] = 1
""", timeout=120)
    status, _, body = get(gw, ws, "files")
    doc = jbody(body)
    assert status == 200 and doc["truncated"] is True
    assert len(doc["files"]) == 10000
    assert max(f["path"].count("/") + 1 for f in doc["files"]) <= 32
    # names the API cannot address are left out, the rest is listed
    status, _, body = call(gw, "DELETE", f"/files/many?workspace={ws}")
    assert status == 409
    kcall(gw, kid, "import shutil; shutil.rmtree('/mnt/data/many'); R['ok'] = 1")
    ls = listing(gw, ws)
    assert "odd/fine" in ls and not any(p.startswith("odd/") and p != "odd/fine" for p in ls)


def test_delete(gw, kw):
    kid, ws = kw
    kcall(gw, kid, "import os; os.makedirs('/mnt/data/full/x'); os.mkdir('/mnt/data/empty'); "
                   "open('/mnt/data/f', 'w').write('1'); R['ok'] = 1")
    d = lambda p: call(gw, "DELETE", f"/files/{p}?workspace={ws}")
    assert d("f")[0] == 204
    assert d("f")[0] == 404
    assert d("full")[0] == 409
    assert d("empty")[0] == 204
    assert d("full/x")[0] == 204 and d("full")[0] == 204
    assert d("..%2f..%2fetc%2fpasswd")[0] in (400, 404)
    assert os.path.exists("/etc/passwd")
    assert listing(gw, ws) == {}
    status, hdrs, body = d("missing/deeper")
    assert status == 404 and jbody(body)["reason"] == "Not Found"


def test_wrong_methods_are_405(gw, kw):
    kid, ws = kw
    for method, path in (("GET", "/upload"), ("POST", "/download/x"), ("GET", "/files/x"),
                         ("DELETE", "/check_file/x"), ("POST", "/upload/x"), ("PUT", "/upload")):
        status, _, body = call(gw, method, f"{path}?workspace={ws}")
        assert status == 405, (method, path, body)


# ---- instance endpoints ----

def test_self_identify_and_its_header_on_every_response(gateway_factory):
    gw = gateway_factory("--instance-id", "kgw-test.instance:1")
    status, _, body = call(gw, "GET", "/self_identify")
    assert status == 200 and jbody(body) == {"instance_id": "kgw-test.instance:1"}
    status, model, _ = gw.request("POST", "/api/kernels", {})
    ws = model["workspace"]
    responses = [
        call(gw, "GET", "/api", auth=False), call(gw, "GET", "/api/kernels"),
        call(gw, "GET", "/api/kernels", auth=False), call(gw, "GET", "/nope"),
        call(gw, "PATCH", "/api/kernels"), call(gw, "POST", "/api/kernels", body=b"[1"),
        call(gw, "GET", "/check_liveness", auth=False), call(gw, "GET", "/check_ready", auth=False),
        put(gw, ws, "f", b"x"),
        get(gw, ws, "download", "f"), get(gw, ws, "download", "missing"),
        call(gw, "OPTIONS", "/files"), call(gw, "GET", "/openapi.json"),
    ]
    for status, hdrs, body in responses:
        assert hdrs["X-KGW-Self-Identify"] == "kgw-test.instance:1", (status, body)
    # the websocket upgrade (101) too
    with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as s:
        s.sendall((f"GET /api/kernels/{model['id']}/channels HTTP/1.1\r\n"
                   f"Host: 127.0.0.1:{gw.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   f"Authorization: token {gw.token}\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            assert chunk
            head += chunk
    assert head.startswith(b"HTTP/1.1 101")
    assert b"x-kgw-self-identify: kgw-test.instance:1\r\n" in head.lower()


def test_instance_id_from_the_environment_or_random(gateway_factory):
    a = gateway_factory(env={"KGW_INSTANCE_ID": "from-env"})
    assert jbody(call(a, "GET", "/self_identify")[2])["instance_id"] == "from-env"
    b, c = gateway_factory(), gateway_factory()
    ib = jbody(call(b, "GET", "/self_identify")[2])["instance_id"]
    ic = jbody(call(c, "GET", "/self_identify")[2])["instance_id"]
    assert ib != ic and re.fullmatch(r"[0-9a-f-]{36}", ib)


def test_bad_instance_id_is_refused_at_start(tmp_path):
    import subprocess
    from conftest import KGW_BIN
    for bad in ("a b", "x\r\nSet-Cookie: a=b", "y" * 129):
        p = subprocess.run([KGW_BIN, "--instance-id", bad, "--port", "1"], capture_output=True,
                           timeout=30)
        assert p.returncode == 2 and b"instance-id" in p.stderr


def test_check_liveness_and_readiness(gateway_factory):
    """Liveness says the loop runs; readiness whether a new kernel would be accepted now."""
    gw = gateway_factory("--max-kernels", "1")
    status, hdrs, body = call(gw, "GET", "/check_liveness", auth=False)
    assert status == 200 and jbody(body) == {"status": "ok"}
    status, hdrs, body = call(gw, "GET", "/check_ready", auth=False)
    assert status == 200 and jbody(body) == {"status": "ready", "kernels_free": 1}
    status, model, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201
    status, _, body = call(gw, "GET", "/check_ready", auth=False)
    assert status == 503
    doc = jbody(body)
    assert doc["status"] == "unavailable" and "kernel limit" in doc["reason"]
    assert doc["kernels_free"] == 0
    # at the kernel limit the gateway is alive all the same
    status, _, body = call(gw, "GET", "/check_liveness", auth=False)
    assert status == 200 and jbody(body) == {"status": "ok"}
    assert gw.delete_kernel(model["id"]) == 204
    assert call(gw, "GET", "/check_ready", auth=False)[0] == 200


def test_check_ready_when_host_memory_is_short(gateway_factory):
    # the option's maximum, 1 TiB, more than this host has: MemAvailable is below it
    gw = gateway_factory("--pool-min-available", str(1 << 40), "--pool", "python3=0")
    status, _, body = call(gw, "GET", "/check_ready", auth=False)
    assert status == 503 and "memory" in jbody(body)["reason"], body
    assert call(gw, "GET", "/check_liveness", auth=False)[0] == 200


def test_check_ready_without_a_sandbox_is_503(gateway_factory, tmp_path):
    # a runtime directory the kernels' uids cannot reach makes the sandbox unavailable
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    gw = gateway_factory("--runtime-dir", str(locked / "rt"))
    assert gw.request("GET", "/api")[1]["sandbox"] == "unavailable"
    status, _, body = call(gw, "GET", "/check_ready", auth=False)
    assert status == 503 and "sandbox" in jbody(body)["reason"]
    assert str(tmp_path) not in body.decode()  # unauthenticated: no host path
    # the gateway itself is alive
    status, _, body = call(gw, "GET", "/check_liveness", auth=False)
    assert status == 200 and jbody(body) == {"status": "ok"}


def test_openapi_is_the_repository_document(gw):
    status, hdrs, body = call(gw, "GET", "/openapi.json")
    assert status == 200 and hdrs["Content-Type"] == "application/json"
    with open(os.path.join(REPO, "docs", "openapi.json"), "rb") as f:
        assert body == f.read()
    doc = json.loads(body)
    assert doc["openapi"].startswith("3.")
    for p in ("/upload", "/upload/{path}", "/download/{path}", "/check_file/{path}", "/files",
              "/files/{path}", "/self_identify", "/check_liveness", "/check_ready", "/openapi.json",
              "/channel",
              "/api/kernels/{id}/channels", "/api/kernels"):
        assert p in doc["paths"], p
