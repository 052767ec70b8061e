#!/usr/bin/env python3
"""The call picture inside a layer has no circle (issue 14): for each directory given, the
files' non-static functions are found by a regex, a file that names another file's function
calls it, and no group of files may call each other in a circle. A lower file tells a higher
one what it must know through an ops struct or a callback (docs/architecture.md, "kernelmgr's
floors").

In gateway/, every file is also a face (what a client speaks to: routes, websockets, MCP,
E2B), a service (what the faces share) or wiring (what names every face: the route table, the
faces' table, start-up), as GATEWAY below says, and (docs/architecture.md, "Faces and kernel
events"): a service calls no face, a face calls no other face (the files of one face call
each other), and only wiring calls wiring. A file not in the table fails too.

Prints every circle and every such call with the names called; exit status 1 if there is one.

usage: layering.py DIR..."""
import glob
import os
import re
import sys

# a non-static definition at the start of a line: any return type ("SSL *", "const struct x
# *"), on the line of the name or the one before it
DEF = re.compile(r"^(?!static\b|typedef\b)[A-Za-z_][\w \*]*?\n?\b(\w+)\(([^;{]*)\)\s*\{", re.M)

FACE, SERVICE, WIRING = "face", "service", "wiring"

# gateway/'s files: (kind, the face a face file belongs to, why)
GATEWAY = {
    # wiring: names every face
    "main.c": (WIRING, None, "the process: options, start-up, the loop, the end"),
    "routes.c": (WIRING, None, "the route table: a row per route naming its face's handlers"),
    "faces.c": (WIRING, None, "the faces' table: each face's start, end and websockets' close"),
    "setup.c": (WIRING, None, "start-up steps: the loop, the kernel manager, the faces"),
    # services: what faces share
    "auth.c": (SERVICE, None, "keys, tenants and peers of requests and websockets"),
    "ckpt.c": (SERVICE, None, "checkpoint records and operations (REST, execute API, MCP)"),
    "conns.c": (SERVICE, None, "client connections and their limits"),
    "drain.c": (SERVICE, None, "the graceful shutdown (closes websockets through faces_close)"),
    "files.c": (SERVICE, None, "workspace files: resolution, listing, reads, child writes"),
    "gsecret.c": (SERVICE, None, "the gateway's secrets and TLS material"),
    "glisten.c": (SERVICE, None, "listening sockets, accepted on the loop and handed to lws"),
    "gw.c": (SERVICE, None, "the server object: kernels by id, refusals"),
    "handover.c": (SERVICE, None, "the restart in place: listening sockets and a record across exec"),
    "http.c": (SERVICE, None, "the HTTP transport: requests, bodies, replies"),
    "kerr.c": (SERVICE, None, "the one table of kernel operations' errors (a pure table)"),
    "kops.c": (SERVICE, None, "kernel operations and their audit, for every face"),
    "lwsloop.c": (SERVICE, None, "libwebsockets on the event loop"),
    "ratelimit.c": (SERVICE, None, "rate limits of connections, headers and auth failures"),
    "reqguard.c": (SERVICE, None, "raw request checks before libwebsockets"),
    "route.c": (SERVICE, None, "the path matcher (a pure table)"),
    "sdnotify.c": (SERVICE, None, "readiness to systemd"),
    "selftest.c": (SERVICE, None, "the start-up self test"),
    "wsconn.c": (SERVICE, None, "a websocket connection: auth, limits, send queue"),
    "wsnap.c": (SERVICE, None, "workspace snapshots and diffs (the execute API's files)"),
    "wsq.c": (SERVICE, None, "a websocket's bounded send queue"),
    "xcmd.c": (SERVICE, None, "commands: specs, stdin, collected runs (REST, MCP)"),
    "xexec.c": (SERVICE, None, "executions (execute API, MCP, E2B)"),
    # faces: a face's files may call each other
    "rest.c": (FACE, "jupyter-rest", "Jupyter Server's REST API: kernels, kernelspecs, status"),
    "sessions.c": (FACE, "jupyter-rest", "its /api/sessions: a session's kernel starts as REST's"),
    "wschan.c": (FACE, "jupyter-websocket", "/api/kernels/{id}/channels"),
    "channel.c": (FACE, "channel", "/channel: the RPC websocket"),
    "chconn.c": (FACE, "channel", "its connections"),
    "chclient.c": (FACE, "channel", "its kernel clients"),
    "chrpc.c": (FACE, "channel", "its RPC methods"),
    "xapi.c": (FACE, "execute", "the execute API's routes"),
    "xcmdapi.c": (FACE, "commands", "the /commands routes"),
    "filesapi.c": (FACE, "files", "the file routes"),
    "ckptapi.c": (FACE, "checkpoints", "the checkpoint routes"),
    "gfork.c": (FACE, "fork", "POST /api/kernels/{id}/fork"),
    "mcp.c": (FACE, "mcp", "MCP over HTTP"),
    "mcpnamed.c": (FACE, "mcp", "its named kernels"),
    "mcptools.c": (FACE, "mcp", "its tools and the answers they make"),
    "e2b.c": (FACE, "e2b", "the E2B API: sandboxes, control plane"),
    "e2bsbx.c": (FACE, "e2b", "its sandbox plane"),
    "e2bfs.c": (FACE, "e2b", "its filesystem calls"),
    "e2bwatch.c": (FACE, "e2b", "its directory watches (inotify)"),
    "e2bconn.c": (FACE, "e2b", "its Connect-RPC errors, headers and streamed chunks"),
    "metrics.c": (FACE, "metrics", "GET /metrics"),
    "playground.c": (FACE, "playground", "the playground page"),
}

# calls against those rules that stay for now: (caller, callee): why. Keep it short.
EXCEPTIONS = {}


def calls(d):
    files = sorted(glob.glob(os.path.join(d, "*.c")))
    defs = {}
    for f in files:
        for m in DEF.finditer(open(f).read()):
            defs[m.group(1)] = os.path.basename(f)
    edges = {os.path.basename(f): {} for f in files}
    for f in files:
        src = re.sub(r"/\*.*?\*/", "", open(f).read(), flags=re.S)
        src = re.sub(r"//[^\n]*", "", src)
        words = set(re.findall(r"\b\w+\b", src))
        for name, g in defs.items():
            if g != os.path.basename(f) and name in words:
                edges[os.path.basename(f)].setdefault(g, []).append(name)
    return edges


def circles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def floors(edges, table, exceptions):
    """The calls against the face/service/wiring rules, and the files not in the table."""
    out = []
    for a in sorted(edges):
        if a not in table:
            out.append(f"{a}: not in the table of faces, services and wiring (tests/layering.py)")
            continue
        ka, fa, _ = table[a]
        for b, names in sorted(edges[a].items()):
            if b not in table or (a, b) in exceptions:
                continue
            kb, fb, _ = table[b]
            why = None
            if ka == SERVICE and kb == FACE:
                why = f"a service calls the {fb} face"
            elif ka == FACE and kb == FACE and fa != fb:
                why = f"the {fa} face calls the {fb} face"
            elif kb == WIRING and ka != WIRING:
                why = f"a {ka} calls wiring"
            if why:
                out.append(f"{a} -> {b}: {why}: {', '.join(sorted(names))}")
    for a, b in sorted(exceptions):
        if b not in edges.get(a, {}):
            out.append(f"{a} -> {b}: listed as an exception, but no such call: drop it")
    return out


def main(dirs):
    bad = 0
    for d in dirs:
        edges = calls(d)
        if not edges:
            print(f"{d}: no C files")
            bad = 1
        if os.path.basename(os.path.normpath(d)) == "gateway":
            for line in floors(edges, GATEWAY, EXCEPTIONS):
                bad = 1
                print(f"{d}: {line}")
        for comp in circles(edges):
            bad = 1
            print(f"{d}: files calling each other in a circle: {', '.join(comp)}")
            for a in comp:
                for g, names in sorted(edges[a].items()):
                    if g in comp:
                        print(f"   {a} -> {g}: {', '.join(sorted(names))}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
