#!/usr/bin/python3
"""Renders kgw's router configuration (HAProxy) from haproxy.cfg.in and shard-backend.in.

The same template serves the local multi-shard test and Kubernetes:

  render.py --out DIR --bind 127.0.0.1:8080 --shard kgw-0=127.0.0.2:8888 --shard ...
      writes DIR/haproxy.cfg, DIR/tags.map, DIR/names.map (the config names DIR as its map dir)
  render.py --kubernetes --replicas 3 [--namespace kgw] > deploy/kubernetes/router-config.yaml
      the same three files as a ConfigMap; shards are the StatefulSet's pods kgw-0..kgw-N-1,
      addressed through the headless Service kgw-shards and resolved at run time

A shard's tag is the first 4 hex digits of SHA-256(name) (common/shardid.h: kgw mints ids with
it); two shards with one tag cannot be told apart, so rendering fails for such a set.
Standard library only.
"""
import argparse
import hashlib
import os
import re
import string
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NAME_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # kgw's --instance-id (common/ident.h)


def tag(name):
    return hashlib.sha256(name.encode()).hexdigest()[:4]


def backend_name(name):
    return "shard_" + name


def render(shards, bind, mapdir, kubernetes, maxconn=20000, backup=None):
    """shards: [(name, addr)]; backup: HOST:PORT of the Service of ready shards (Kubernetes).
    Returns {filename: text}."""
    seen = {}
    for name, _ in shards:
        if not NAME_RE.match(name):
            raise ValueError(f"shard name {name!r}: 1 to 128 of [A-Za-z0-9._:-]")
        t = tag(name)
        if t in seen:
            raise ValueError(f"shards {seen[t]!r} and {name!r} have the same tag {t}: rename one")
        seen[t] = name
    with open(os.path.join(HERE, "haproxy.cfg.in")) as f:
        main = string.Template(f.read())
    with open(os.path.join(HERE, "shard-backend.in")) as f:
        shard_t = string.Template(f.read())
    if kubernetes:
        # names resolve through the cluster DNS at run time; a shard not yet (or no longer)
        # resolvable starts down instead of stopping the router from starting
        resolvers = ("resolvers kube\n    parse-resolv-conf\n    hold valid 5s\n"
                     "    hold nx 5s\n    hold obsolete 5s\n")
        server_opts = "resolvers kube init-addr none"
        log_target = "stdout"
        connect, inter, fast = "1s", "2s", "500ms"
    else:
        resolvers, server_opts, log_target = "", "", "stderr"
        connect, inter, fast = "500ms", "500ms", "200ms"
    common = {"SERVER_OPTS": server_opts, "CHECK_INTER": inter, "CHECK_FAST": fast}
    creates = "\n".join(f"    server {n} {a} check" for n, a in shards)
    if backup:
        # Kubernetes' own view of readiness: the Service of ready shards, used only when the
        # router's checks find no shard ready (its DNS or checks failing, not the shards)
        creates += f"\n    server creates-svc {backup} check backup"
    backends = "\n".join(
        shard_t.substitute(NAME=n, ADDR=a, TAG=tag(n), BACKEND=backend_name(n), **common)
        for n, a in shards)
    # the router's own liveness (Kubernetes probes): it answers while HAProxy runs, whatever
    # the shards do
    health = ("frontend health\n    bind :8404\n    http-request return status 200 "
              "content-type text/plain string ok if { path /healthz }\n"
              "    http-request deny status 404\n") if kubernetes else ""
    cfg = main.substitute(HEALTH=health, LOG_TARGET=log_target, MAXCONN=maxconn, RESOLVERS=resolvers,
                          CONNECT_TIMEOUT=connect, BIND=bind, MAPDIR=mapdir,
                          CREATES_SERVERS=creates, SHARD_BACKENDS=backends, **common)
    head = "# rendered by deploy/haproxy/render.py: shard tag (common/shardid.h) -> backend\n"
    tags = head + "".join(f"{tag(n)} {backend_name(n)}\n" for n, _ in shards)
    names = head.replace("shard tag", "shard name") + "".join(
        f"{n} {backend_name(n)}\n" for n, _ in shards)
    return {"haproxy.cfg": cfg, "tags.map": tags, "names.map": names}


def configmap(files, namespace):
    def block(text):
        return "".join(("    " + line if line else "") + "\n" for line in text.splitlines())
    out = ["# rendered by deploy/haproxy/render.py --kubernetes: do not edit, render again",
           "---", "apiVersion: v1", "kind: ConfigMap", "metadata:", "  name: kgw-router",
           f"  namespace: {namespace}", "  labels:", "    app.kubernetes.io/name: kgw-router",
           "    app.kubernetes.io/part-of: kgw", "data:"]
    text = "\n".join(out) + "\n"
    for name in sorted(files):
        text += f"  {name}: |\n" + block(files[name])
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shard", action="append", default=[], metavar="NAME=HOST:PORT")
    ap.add_argument("--bind", default=None, help="address:port the router listens on")
    ap.add_argument("--out", help="directory for haproxy.cfg, tags.map, names.map")
    ap.add_argument("--kubernetes", action="store_true", help="a ConfigMap on stdout")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--namespace", default="kgw")
    ap.add_argument("--port", type=int, default=8888, help="kgw's port in the pods")
    ap.add_argument("--maxconn", type=int, default=0,
                    help="connections the router holds (default 20000 in Kubernetes, 1000 "
                         "locally: each takes two descriptors)")
    args = ap.parse_args(argv)
    try:
        if args.kubernetes:
            if not 1 <= args.replicas <= 1000:
                raise ValueError("--replicas: 1 to 1000")
            shards = [(f"kgw-{i}", f"kgw-{i}.kgw-shards.{args.namespace}.svc.cluster.local:"
                       f"{args.port}") for i in range(args.replicas)]
            files = render(shards, args.bind or ":8080", "/usr/local/etc/haproxy", True,
                           args.maxconn or 20000,
                           f"kgw-creates.{args.namespace}.svc.cluster.local:{args.port}")
            sys.stdout.write(configmap(files, args.namespace))
            return 0
        if not args.out or not args.shard or not args.bind:
            raise ValueError("--out, --bind and at least one --shard (or --kubernetes)")
        shards = []
        for s in args.shard:
            name, sep, addr = s.partition("=")
            if not sep or not addr:
                raise ValueError(f"--shard {s!r}: NAME=HOST:PORT")
            shards.append((name, addr))
        out = os.path.abspath(args.out)
        files = render(shards, args.bind, out, False, args.maxconn or 1000)
    except ValueError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
