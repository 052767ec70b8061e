#!/usr/bin/env python3
"""Run code through kgw's execute API and stream what it prints, shows and raises to the
terminal, as it happens (standard library only; docs/execute.md).

    examples/execute.py --url http://127.0.0.1:8888 --token KEY 'print(6*7)'
    examples/execute.py --kernel KERNEL_ID --timeout 5 'import time; time.sleep(100)'
    examples/execute.py --file data.csv 'import pandas; print(pandas.read_csv("data.csv"))'

Without --kernel the code runs one-shot (POST /api/execute) on a fresh kernel that is deleted
afterwards (--keep keeps it). If the connection drops, the stream resumes from the last event
received (GET /api/executions/{id}/events?since=N), so nothing is missed or shown twice. The
exit status is 0 when the execution ended "ok", 1 otherwise; the end (status, cause, duration,
files created, modified or deleted) is written to stderr.
"""
import argparse
import base64
import http.client
import json
import os
import sys
import time
import urllib.parse
import uuid


def connect(url, timeout):
    u = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port or (443 if u.scheme == "https" else 80), timeout=timeout)


def show(event, out=sys.stdout, err=sys.stderr):
    """Writes one event to the terminal."""
    t = event["type"]
    if t == "stream":
        (err if event["name"] == "stderr" else out).write(event["text"])
    elif t in ("result", "display"):
        data = event["data"]
        if "text/plain" in data:
            out.write(data["text/plain"] + "\n")
        others = sorted(k for k in data if k != "text/plain")
        if others:
            out.write(f"[{t}: {', '.join(others)}]\n")
    elif t == "error":
        err.write("\n".join(event["traceback"]) + "\n" if event["traceback"]
                  else f"{event['ename']}: {event['evalue']}\n")
    out.flush()


def stream(args, headers, method, path, body):
    """Sends one request and yields its NDJSON events until the stream ends."""
    c = connect(args.url, args.timeout)
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        if r.status >= 300:
            raise SystemExit(f"{method} {path}: {r.status} {r.read().decode(errors='replace')}")
        for line in r:
            yield json.loads(line)
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("code", nargs="+", help="code to run (several arguments: one per line)")
    ap.add_argument("--url", default=os.environ.get("KGW_URL", "http://127.0.0.1:8888"))
    ap.add_argument("--token", default=os.environ.get("KGW_API_KEY", ""))
    ap.add_argument("--kernel", help="run on this kernel (default: a fresh one-shot kernel)")
    ap.add_argument("--kernel-name", help="kernelspec of a one-shot kernel")
    ap.add_argument("--file", action="append", default=[],
                    help="upload this local file into a one-shot kernel's workspace")
    ap.add_argument("--keep", action="store_true", help="keep the one-shot kernel")
    ap.add_argument("--exec-timeout", type=float, help="interrupt the code after this many s")
    ap.add_argument("--timeout", type=float, default=600, help="network timeout, seconds")
    args = ap.parse_args()

    body = {"code": "\n".join(args.code)}
    if args.exec_timeout:
        body["timeout"] = args.exec_timeout
    if args.kernel:
        path = f"/api/kernels/{args.kernel}/execute"
    else:
        path = "/api/execute"
        body["keep"] = args.keep
        if args.kernel_name:
            body["kernel_name"] = args.kernel_name
        body["files"] = []
        for f in args.file:
            with open(f, "rb") as fh:
                body["files"].append({"path": os.path.basename(f), "encoding": "base64",
                                      "content": base64.b64encode(fh.read()).decode()})
    headers = {"Authorization": f"token {args.token}", "Content-Type": "application/json",
               "Accept": "application/x-ndjson",
               # a retried POST (after a network error) must not run the code twice
               "Idempotency-Key": str(uuid.uuid4())}
    payload = json.dumps(body).encode()

    seq, execution, end = -1, None, None
    for attempt in range(5):
        try:
            if execution is None:
                events = stream(args, headers, "POST", path, payload)
            else:
                events = stream(args, headers, "GET",
                                f"/api/executions/{execution}/events?since={seq + 1}", None)
            for ev in events:
                seq = ev["seq"]
                if ev["type"] == "start":
                    execution = ev["execution_id"]
                elif ev["type"] == "end":
                    end = ev
                else:
                    show(ev)
            if end:
                break
        except (OSError, http.client.HTTPException) as e:
            print(f"[connection lost ({e}); resuming after event {seq}]", file=sys.stderr)
            time.sleep(min(2 ** attempt * 0.2, 5))
    if not end:
        raise SystemExit("the execution's end was not received")
    files = end.get("files") or {}
    changed = ", ".join(f"{k} {files[k]}" for k in ("created", "modified", "deleted")
                        if files.get(k))
    print(f"[{end['status']}{': ' + end['cause'] if end['cause'] else ''}; "
          f"{end['duration_ms']:.1f} ms{'; ' + changed if changed else ''}"
          f"{'; kernel ' + end['kernel_id'] if args.keep and end.get('kernel_id') else ''}]",
          file=sys.stderr)
    return 0 if end["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
