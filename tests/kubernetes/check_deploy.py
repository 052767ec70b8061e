#!/usr/bin/python3
"""Offline checks of the scale-out deployment (docs/scale-out.md), no cluster:

- every YAML file under deploy/kubernetes parses and passes yamllint (Debian's yamllint);
- every Kubernetes object validates against the Kubernetes object schemas (npm
  kubernetes-models, tests/kubernetes/validate.mjs), strictly: misspelt fields are caught, and
  a self-test shows they are;
- the committed router ConfigMap is what deploy/haproxy/render.py renders for the
  StatefulSet's number of shards;
- HAProxy's own check (haproxy -c) accepts the router configuration as rendered for
  Kubernetes and for the local test.

Needs yamllint, haproxy, node and `npm ci` in tests/kubernetes (scripts/test.sh does it).
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
K8S = os.path.join(REPO, "deploy", "kubernetes")
RENDER = os.path.join(REPO, "deploy", "haproxy", "render.py")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def check_yamllint():
    r = run(["yamllint", "-s", "-c", os.path.join(K8S, ".yamllint.yaml"), K8S])
    return r.returncode == 0, r.stdout + r.stderr


def check_schemas():
    if not os.path.isdir(os.path.join(HERE, "node_modules", "kubernetes-models")):
        return False, f"run `npm ci` in {HERE}"
    r = run(["node", "validate.mjs", "--self-test", K8S], cwd=HERE)
    return r.returncode == 0, r.stdout + r.stderr


def statefulset_replicas():
    import yaml  # python3-yaml, a dependency of yamllint
    with open(os.path.join(K8S, "statefulset.yaml")) as f:
        sts = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "StatefulSet")
    return sts["spec"]["replicas"]


def check_configmap_rendered():
    # for as many shards as the StatefulSet has: a shard the router does not know gets no
    # creates, and its kernels' ids would answer the router's 404
    n = statefulset_replicas()
    r = run([PY, RENDER, "--kubernetes", "--replicas", str(n)])
    with open(os.path.join(K8S, "router-config.yaml")) as f:
        same = f.read() == r.stdout
    return r.returncode == 0 and same, r.stderr or ("" if same else
        "deploy/kubernetes/router-config.yaml is stale: deploy/haproxy/render.py --kubernetes "
        f"--replicas {n} > deploy/kubernetes/router-config.yaml")


def check_haproxy():
    import yaml  # python3-yaml, a dependency of yamllint
    out = []
    with tempfile.TemporaryDirectory(prefix="kgw-haproxy-check-") as d:
        local = os.path.join(d, "local")
        r = run([PY, RENDER, "--out", local, "--bind", "127.0.0.1:8080",
                 "--shard", "kgw-0=127.0.0.2:8888", "--shard", "kgw-1=127.0.0.3:8888"])
        if r.returncode:
            return False, r.stderr
        with open(os.path.join(K8S, "router-config.yaml")) as f:
            data = yaml.safe_load(f)["data"]
        k8s = os.path.join(d, "k8s")
        os.makedirs(k8s)
        for name, text in data.items():
            with open(os.path.join(k8s, name), "w") as f:
                # the ConfigMap is mounted at /usr/local/etc/haproxy in the router's pod
                f.write(text.replace("/usr/local/etc/haproxy", k8s))
        ok = True
        for cfg in (os.path.join(local, "haproxy.cfg"), os.path.join(k8s, "haproxy.cfg")):
            r = run(["haproxy", "-c", "-f", cfg])
            ok &= r.returncode == 0
            out.append(f"{cfg}: {r.stdout.strip()} {r.stderr.strip()}")
        # a tag collision is refused
        r = run([PY, RENDER, "--out", os.path.join(d, "bad"), "--bind", "127.0.0.1:8080",
                 "--shard", "kgw-0=127.0.0.2:8888", "--shard", "kgw-0=127.0.0.3:8888"])
        ok &= r.returncode == 2 and "same tag" in r.stderr
        out.append(f"duplicate shard: exit {r.returncode}: {r.stderr.strip()}")
    return ok, "\n".join(out)


def main():
    checks = [("yamllint", check_yamllint), ("schemas", check_schemas),
              ("configmap rendered", check_configmap_rendered), ("haproxy -c", check_haproxy)]
    passed = failed = 0
    for name, fn in checks:
        tool = {"yamllint": "yamllint", "schemas": "node", "haproxy -c": "haproxy"}.get(name)
        if tool and not shutil.which(tool):
            ok, detail = False, f"{tool} is not installed (scripts/deps.sh --test)"
        else:
            ok, detail = fn()
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
        if not ok or os.environ.get("VERBOSE"):
            print("    " + detail.strip().replace("\n", "\n    "))
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
