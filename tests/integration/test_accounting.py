"""Accounting: the bytes a tenant stores are its own. Uploads into a workspace are charged to the
memory cgroup of the workspace's kernel (as the kernel's own writes are), not to the gateway's;
an upload that its kernel's memory limit cannot hold is refused (413) without harming the
kernel; and a tenant that needs room for a new workspace evicts its own oldest workspaces kept
only for downloads before it is refused."""
import re
import time
import urllib.parse

import pytest

import sbxutil as S

pytestmark = pytest.mark.needs_sandbox

MiB = 1 << 20


def memory_file(gw, kid):
    pid = int(re.search(rf"kernel={kid}: ready \(pid (\d+)", gw.log()).group(1))
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctls, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctls.split(","):
                return f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"
            if ctls == "":
                v2 = f"/sys/fs/cgroup{path}/memory.current"
    return v2


def usage(path):
    with open(path) as f:
        return int(f.read())


def put(gw, ws, path, data):
    return gw.request("PUT", f"/upload/{urllib.parse.quote(path)}?workspace={ws}",
                      raw_body=data, headers={"Content-Type": "application/octet-stream"})


def test_upload_bytes_are_charged_to_the_kernels_memory_cgroup(gateway_factory):
    gw = gateway_factory()
    S.assert_sandboxed_gateway(gw)
    status, k, _ = gw.request("POST", "/api/kernels", {"limits": {"memory": 384 * MiB}})
    assert status == 201, k
    kid, ws = k["id"], k["workspace"]
    mem = memory_file(gw, kid)
    S.kcall(gw, kid, "R['ok'] = 1")
    before = usage(mem)
    status, body, _ = put(gw, ws, "in/data.bin", b"\x5a" * (64 * MiB))
    assert status == 201 and body["size"] == 64 * MiB, body
    grown = usage(mem) - before
    assert grown >= 60 * MiB, f"the kernel's cgroup grew by {grown} bytes for a 64 MiB upload"
    assert grown <= 80 * MiB, f"the kernel's cgroup grew by {grown} bytes (slack not released)"
    r = S.kcall(gw, kid, "import os; R['size'] = os.path.getsize('/mnt/data/in/data.bin')")
    assert r["size"] == 64 * MiB

    # more than the kernel's memory limit leaves: refused, nothing kept, the kernel unharmed
    status, body, _ = put(gw, ws, "big.bin", b"\x00" * (384 * MiB))
    assert status == 413 and "memory limit" in body["message"], (status, body)
    assert gw.request("GET", f"/check_file/big.bin?workspace={ws}")[1]["exists"] is False
    assert S.kcall(gw, kid, "R['x'] = 6 * 7")["x"] == 42
    assert usage(mem) - before <= 80 * MiB
    status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
    assert status == 200 and model["execution_state"] != "dead", model
    assert "killed" not in gw.log().split(f"kernel={kid}: ready")[-1]

    # a workspace with no kernel left: the upload is the gateway's to hold, and it still works
    assert gw.delete_kernel(kid) == 204
    status, body, _ = put(gw, ws, "later.bin", b"x" * MiB)
    assert status == 201, body


def test_tenant_bytes_quota_evicts_oldest_download_only_workspaces(gateway_factory):
    gw = gateway_factory("--workspace-size", str(16 * MiB), "--tenant-max-bytes",
                         str(48 * MiB), "--workspace-grace", "600")
    S.assert_sandboxed_gateway(gw)
    ks = []
    for _ in range(3):
        status, k, _ = gw.request("POST", "/api/kernels", {})
        assert status == 201, k
        ks.append(k)
    status, body, _ = gw.request("POST", "/api/kernels", {})
    assert status == 403 and "quota" in body["message"], body  # 3 x 16 MiB reserved
    # uploads fill a workspace up to its size, never beyond: the quota holds them
    status, body, _ = put(gw, ks[0]["workspace"], "a.bin", b"a" * (4 * MiB))
    assert status == 201, body
    status, body, _ = put(gw, ks[0]["workspace"], "huge.bin", b"h" * (20 * MiB))
    assert status == 413 and "full" in body["message"], body

    # two kernels end: their workspaces stay for downloads, still counted
    for k in ks[:2]:
        assert gw.delete_kernel(k["id"]) == 204
        time.sleep(0.2)  # distinct last use
    # a download touches the first: the second is now the oldest
    assert gw.request("GET", f"/check_file/a.bin?workspace={ks[0]['workspace']}")[0] == 200
    status, k4, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201, k4
    assert gw.request("GET", f"/files?workspace={ks[1]['workspace']}")[0] == 404
    status, body, _ = gw.request("GET", f"/check_file/a.bin?workspace={ks[0]['workspace']}")
    assert status == 200 and body["exists"] is True
    assert re.search(rf"workspace={ks[1]['workspace']}: removed early: its tenant needs room "
                     r"for a new workspace \(--tenant-max-bytes\)", gw.log())

    status, k5, _ = gw.request("POST", "/api/kernels", {})
    assert status == 201, k5
    assert gw.request("GET", f"/files?workspace={ks[0]['workspace']}")[0] == 404
    # every workspace has a kernel now: nothing to evict, refused
    status, body, _ = gw.request("POST", "/api/kernels", {})
    assert status == 403 and "quota" in body["message"], body
    for k in (ks[2], k4, k5):
        assert gw.delete_kernel(k["id"]) == 204


def test_oneshot_files_are_charged_to_the_kernel_at_once(gateway_factory):
    """A one-shot's files are charged to its kernel's memory cgroup, all of them written by
    one child in that cgroup that the loop does not wait for (a request used to cost a
    blocking fork per file)."""
    import base64
    import json
    gw = gateway_factory("--max-body-bytes", str(64 * MiB), "--pool", "")
    S.assert_sandboxed_gateway(gw)
    files = [{"path": f"in/f{i}.bin", "encoding": "base64",
              "content": base64.b64encode(bytes([i]) * (4 * MiB)).decode()} for i in range(8)]
    files.append({"path": "empty.txt", "content": ""})
    code = ("import os\n"
            "print(sum(os.path.getsize(f'/mnt/data/in/f{i}.bin') for i in range(8)))")
    status, ev, _ = gw.request("POST", "/api/execute", {"code": code, "files": files,
                                                        "keep": True})
    assert status == 201, ev
    ev = [json.loads(x) for x in ev.splitlines()] if isinstance(ev, bytes) else [ev]
    end = ev[-1]
    assert end["type"] == "end" and end["status"] == "ok", ev
    assert [e["text"] for e in ev if e["type"] == "stream"] == [f"{32 * MiB}\n"], ev
    kid = end["kernel_id"]
    stat = memory_file(gw, kid).rsplit("/", 1)[0] + "/memory.stat"
    with open(stat) as f:
        shmem = int(re.search(r"^shmem (\d+)$", f.read(), re.M).group(1))
    assert shmem >= 32 * MiB, f"the kernel's cgroup holds {shmem} bytes of tmpfs for 32 MiB"
    # one charging child for the request, not one per file
    ws = re.search(r'"workspace_id":\s*"([^"]+)"', json.dumps(ev[0])).group(1)
    lines = re.findall(rf"workspace={ws}: writing (\d+) files", gw.log())
    assert lines == ["9"], lines
    gw.delete_kernel(kid)
