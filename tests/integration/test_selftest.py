"""`kgw selftest`: a real sandboxed kernel checks the sandbox from inside (docs/operations.md).

The weakened variant: a test build made with `-Dbuildtype=debug -Dtest_weaken=seccomp` leaves
the seccomp filter out of kernels; its `kgw selftest` must fail on the seccomp checks and on
nothing else. Building that second variant is left out of the default run (it is a second
build); CI, or anyone, runs it with
  meson setup build-weak -Dbuildtype=debug -Dtest_weaken=seccomp
  ninja -C build-weak kgw kgw-sandbox-init kgw-zygote
  KGW_WEAK_BIN=build-weak/kgw pytest tests/integration/test_selftest.py
and the test below is skipped without KGW_WEAK_BIN.
"""
import glob
import json
import os
import subprocess
import time

import pytest

import conftest

pytestmark = pytest.mark.needs_sandbox


def selftest(binary, *args):
    t0 = time.monotonic()
    p = subprocess.run([binary, "selftest", *args], capture_output=True, text=True, timeout=120)
    return p, time.monotonic() - t0


def own_cgroups(instance="gw-*"):
    return (set(glob.glob(f"/sys/fs/cgroup/*/kgw-{instance}")) |
            set(glob.glob(f"/sys/fs/cgroup/kgw-{instance}")))


def test_selftest_passes_here_and_leaves_nothing():
    p, took = selftest(conftest.KGW_BIN, "--json")
    out = json.loads(p.stdout)
    failed = [c for c in out["checks"] if not c["pass"]]
    if out.get("weakened"):
        pytest.skip("a weakened test build: see test_weakened_build_fails_exactly_there")
    assert p.returncode == 0 and out["passed"] and not failed, (failed, p.stderr[-2000:])
    groups = {c["group"] for c in out["checks"]}
    assert groups >= {"kernel", "namespaces", "cgroup", "identity", "capabilities", "seccomp",
                      "filesystem", "network", "egress", "rlimits", "environment"}, groups
    assert len(out["checks"]) >= 30
    assert took < 30, took
    # its kernel's and instance's cgroups are gone (other gateways running on this machine
    # meanwhile have their own instances)
    assert out["instance"].startswith("gw-")
    assert not own_cgroups(out["instance"])


def test_selftest_table_and_its_options():
    # the checks follow the options kgw would run with
    p, _ = selftest(conftest.KGW_BIN, "--nofile-limit=777", "--pids-limit=300")
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0].split()[:5] == ["GROUP", "CHECK", "EXPECTED", "SEEN", "RESULT"]
    nofile = [l for l in lines if "RLIMIT_NOFILE" in l][0]
    assert "(777, 777)" in nofile and nofile.endswith("pass"), nofile
    pids = [l for l in lines if "pids limit " in l and "enforced" not in l][0]
    assert " 300 " in pids and pids.endswith("pass"), pids
    assert lines[-1].endswith("0 failed"), lines[-1]


def test_selftest_fails_without_a_sandbox():
    p, _ = selftest(conftest.KGW_BIN, "--json", "--no-sandbox")
    out = json.loads(p.stdout)
    assert p.returncode == 1 and not out["passed"]
    assert [c["check"] for c in out["checks"] if not c["pass"]] == ["sandbox"], out


@pytest.mark.skipif(not os.environ.get("KGW_WEAK_BIN"),
                    reason="needs a -Dtest_weaken=seccomp test build in KGW_WEAK_BIN")
def test_weakened_build_fails_exactly_there():
    p, _ = selftest(os.environ["KGW_WEAK_BIN"], "--json")
    out = json.loads(p.stdout)
    assert out["weakened"] == "seccomp", out
    failed = {(c["group"], c["check"]) for c in out["checks"] if not c["pass"]}
    assert p.returncode == 1 and failed and {g for g, _ in failed} == {"seccomp"}, failed
    assert ("seccomp", "filter") in failed, failed
