"""Referee: the official `huggingface_hub` client against `brevis-hub serve`.

Run by scripts/referee.sh, which starts two servers (A holds the source repo,
B the mirror) and sets HF_ENDPOINT to A and HF_HUB_DISABLE_XET=1.

  (a) create_repo + upload_folder of a real model to A
  (b) snapshot_download it back, compare SHA-256
  (c) brevis-hub mirror A -> B, brevis-hub pull (and verify) from B with the
      manifest checked against the source on A (--source-endpoint; both must
      report source_checked), then load the source repo from that cache with
      HF_HUB_OFFLINE=1 (hf_hub_download and safetensors safe_open) in a fresh
      interpreter
  (d) hf_hub_download / snapshot_download of the source repo from B, which
      serves the mirror decoded on the fly
  (e) list_repo_refs of the source on A, and of the mirror and the decoded
      source on B: `main` at the commit model_info names, no tags
  (h) create_branch and delete_branch on A (the scaled mirror's work
      branch): the branch comes and goes, `main` cannot be deleted

With --strict (the servers run `serve --strict`, like huggingface.co):
  (a) also checks that the safetensors file went up through the multipart
      transfer (part PUTs to the S3 listener, completion on the Hub)
  (a2) upload_file of a small LFS file (one PUT to S3) and an empty file (a
      regular file, as on the Hub), then hf_hub_download of both
  (f) hf_hub_download of every file, each LFS file through the 302 to the
      CDN listener (checked with a HEAD: headers, Location on another port),
      the token kept from the CDN (which refuses one), Range reads (206)
  (g) on server C (rate limit 5/2): model_info until 429, whose RateLimit
      headers huggingface_hub parses and which has no Retry-After; then
      huggingface_hub's own backoff waits the window out and succeeds
--official-only skips (c) and everything that needs the mirror it makes,
printed as SKIP.

Prints `N passed, N failed` (`, N skipped`) last and exits non-zero on any
failure.
"""

import argparse
import hashlib
import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

RESULTS = []
SKIPPED = []


def skip(name, why):
    SKIPPED.append(name)
    print(f"SKIP {name}: {why}", flush=True)


def raw(method, url, headers=None):
    """One request with http.client: no redirect followed, no header added."""
    u = urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        c.request(method, u.path + (f"?{u.query}" if u.query else ""), headers=headers or {})
        r = c.getresponse()
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


def check(name, fn):
    t = time.time()
    try:
        detail = fn()
        RESULTS.append((name, True))
        print(f"PASS {name} ({time.time() - t:.2f}s){': ' + detail if detail else ''}", flush=True)
        return True
    except Exception as e:  # noqa: BLE001 - the referee reports every failure
        RESULTS.append((name, False))
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        return False


def sha256(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def model_files(d):
    out = {}
    for p in sorted(Path(d).rglob("*")):
        rel = p.relative_to(d)
        # Only the parts below `d` count: a model may itself live under ~/.cache.
        if p.is_file() and ".git" not in rel.parts and ".cache" not in rel.parts:
            out[rel.as_posix()] = sha256(p)
    return out


def offline_check(args):
    """Runs in a fresh interpreter with HF_HUB_OFFLINE=1 set before import."""
    from huggingface_hub import hf_hub_download
    from safetensors import safe_open

    want = json.loads(Path(args.want).read_text())
    n_tensors = n_shape_only = 0
    for rel, digest in want.items():
        p = hf_hub_download(args.repo, rel, cache_dir=args.cache)
        got = sha256(p)
        if got != digest:
            raise SystemExit(f"{rel}: sha256 {got} != {digest}")
        if rel.endswith(".safetensors"):
            with safe_open(p, framework="numpy") as f:
                for k in f.keys():
                    if f.get_slice(k).get_dtype() == "BF16":
                        # numpy has no bfloat16: the header is read, the
                        # bytes were already checked by the SHA-256 above.
                        f.get_slice(k).get_shape()
                        n_shape_only += 1
                    else:
                        f.get_tensor(k)
                        n_tensors += 1
    if n_tensors + n_shape_only == 0:
        raise SystemExit("offline: no tensor loaded")
    print(f"offline: {len(want)} files match, {n_tensors} tensors loaded"
          + (f", {n_shape_only} bf16 tensors opened (numpy cannot load bf16)" if n_shape_only else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mirror-endpoint", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--offline-check", action="store_true")
    ap.add_argument("--repo")
    ap.add_argument("--cache")
    ap.add_argument("--want")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--official-only", action="store_true")
    ap.add_argument("--plain-get-cap", type=int)
    ap.add_argument("--limited-endpoint")
    args = ap.parse_args()
    if args.offline_check:
        offline_check(args)
        return

    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    import huggingface_hub.lfs as hf_lfs

    # Count the LFS transfers huggingface_hub makes (strict mode checks that
    # the safetensors file goes up in parts).
    transfers = {"single": 0, "multi": 0}
    _single, _multi = hf_lfs._upload_single_part, hf_lfs._upload_multi_part

    def single(*a, **k):
        transfers["single"] += 1
        return _single(*a, **k)

    def multi(*a, **k):
        transfers["multi"] += 1
        return _multi(*a, **k)

    hf_lfs._upload_single_part, hf_lfs._upload_multi_part = single, multi

    src_ep = os.environ["HF_ENDPOINT"]
    dst_ep = args.mirror_endpoint
    tmp = Path(args.tmp)
    repo = "referee/model"
    mirror = "referee/model-brevis"
    want = model_files(args.model)
    if not any(r.endswith(".safetensors") for r in want):
        raise SystemExit(f"referee: no .safetensors file under {args.model}: nothing to check")
    (tmp / "want.json").write_text(json.dumps(want))
    total = sum(Path(args.model, r).stat().st_size for r in want)
    print(f"model {args.model}: {len(want)} files, {total} bytes", flush=True)
    api = HfApi(endpoint=src_ep, token=os.environ.get("HF_TOKEN"))

    def a():
        url = api.create_repo(repo, exist_ok=True)
        info = api.upload_folder(folder_path=args.model, repo_id=repo, commit_message="referee upload")
        got = sorted(s.rfilename for s in api.model_info(repo).siblings)
        if got != sorted(want):
            raise AssertionError(f"siblings {got} != {sorted(want)}")
        again = api.create_repo(repo, exist_ok=True)
        if args.strict and transfers["multi"] < 1:
            raise AssertionError(f"strict: the safetensors file did not go up in parts: {transfers}")
        return f"{url} commit {getattr(info, 'oid', info)} (exist_ok ok: {again}; LFS transfers {transfers})"

    def a2():
        extras = "referee/extras"
        api.create_repo(extras, exist_ok=True)
        blob = bytes(range(256)) * 64  # 16 KiB, LFS by its name, below the multipart threshold
        before = dict(transfers)
        api.upload_file(path_or_fileobj=blob, path_in_repo="small.bin", repo_id=extras)
        api.upload_file(path_or_fileobj=b"", path_in_repo="empty.safetensors", repo_id=extras)
        if transfers["single"] != before["single"] + 1:
            raise AssertionError(f"small.bin did not go up in one PUT: {before} -> {transfers}")
        sib = {s.rfilename: s for s in api.model_info(extras, files_metadata=True).siblings}
        if sib["small.bin"].lfs is None or sib["empty.safetensors"].lfs is not None:
            raise AssertionError(f"small.bin should be LFS and the empty file regular: {sib}")
        got = Path(hf_hub_download(extras, "small.bin", cache_dir=str(tmp / "extras-cache"))).read_bytes()
        empty = Path(hf_hub_download(extras, "empty.safetensors", cache_dir=str(tmp / "extras-cache"))).read_bytes()
        if got != blob or empty != b"":
            raise AssertionError("extras differ after the round trip")
        return "one-PUT LFS file and empty regular file round-trip"

    def b():
        t = time.time()
        d = snapshot_download(repo, cache_dir=str(tmp / "plain-cache"))
        secs = time.time() - t
        got = model_files(d)
        if got != want:
            raise AssertionError(f"snapshot differs: {set(got.items()) ^ set(want.items())}")
        (tmp / "plain.json").write_text(json.dumps({"seconds": secs, "bytes": total}))
        return f"{len(got)} files, {total} bytes in {secs:.2f}s"

    def c():
        env = dict(os.environ)
        env["HF_HOME"] = str(tmp / "brevis-home")
        t = time.time()
        m = subprocess.run(
            [args.bin, "mirror", repo, "--endpoint", src_ep, "--to-endpoint", dst_ep, "--to", mirror, "--json"],
            env=env, capture_output=True, text=True,
        )
        if m.returncode != 0:
            raise AssertionError(f"mirror exit {m.returncode}: {m.stderr[-2000:]}")
        rep = json.loads(m.stdout)
        mirror_secs = time.time() - t
        cache = tmp / "fresh-cache" / "hub"
        penv = dict(env)
        penv["HF_ENDPOINT"] = dst_ep
        t = time.time()
        # The mirror is on B, its source on A: both check the mirror's
        # manifest against the source there.
        p = subprocess.run(
            [args.bin, "pull", mirror, "--cache-dir", str(cache), "--json", "--source-endpoint", src_ep],
            env=penv, capture_output=True, text=True,
        )
        if p.returncode != 0:
            raise AssertionError(f"pull exit {p.returncode}: {p.stderr[-2000:]}")
        pull = json.loads(p.stdout)
        pull_secs = time.time() - t
        if pull.get("source_checked") is not True:
            raise AssertionError(f"pull did not check the source at {src_ep}: {pull}")
        v = subprocess.run([args.bin, "verify", mirror, "--json", "--require-source", "--source-endpoint", src_ep],
                           env=penv, capture_output=True, text=True)
        if v.returncode != 0:
            raise AssertionError(f"verify exit {v.returncode}: {v.stdout[-1000:]} {v.stderr[-1000:]}")
        if json.loads(v.stdout).get("source_checked") is not True:
            raise AssertionError(f"verify did not check the source at {src_ep}: {v.stdout[-1000:]}")
        oenv = dict(os.environ)
        oenv["HF_HUB_OFFLINE"] = "1"
        oenv.pop("HF_ENDPOINT", None)
        o = subprocess.run(
            [sys.executable, __file__, "--offline-check", "--bin", args.bin, "--model", args.model,
             "--mirror-endpoint", dst_ep, "--tmp", str(tmp), "--repo", repo, "--cache", str(cache),
             "--want", str(tmp / "want.json")],
            env=oenv, capture_output=True, text=True,
        )
        if o.returncode != 0:
            raise AssertionError(f"offline load failed: {o.stdout[-1000:]} {o.stderr[-2000:]}")
        plain = json.loads((tmp / "plain.json").read_text()) if (tmp / "plain.json").exists() else {}
        print(
            f"  sizes: source {rep['source_bytes']} B, mirror {rep['mirror_bytes']} B, ratio {rep['ratio']:.4f}\n"
            f"  mirror: {mirror_secs:.2f}s wall, uploaded {rep['uploaded_bytes']} B\n"
            f"  pull:   {pull_secs:.2f}s wall, downloaded {pull['downloaded_bytes']} B\n"
            f"  plain snapshot_download: {plain.get('seconds', float('nan')):.2f}s wall, {plain.get('bytes', 0)} B",
            flush=True,
        )
        return o.stdout.strip()

    def d():
        got = {}
        for rel in want:
            p = hf_hub_download(repo, rel, cache_dir=str(tmp / "decoded-cache"), endpoint=dst_ep)
            got[rel] = sha256(p)
        if got != want:
            raise AssertionError(f"decoded files differ: {set(got.items()) ^ set(want.items())}")
        d2 = snapshot_download(repo, cache_dir=str(tmp / "decoded-cache2"), endpoint=dst_ep)
        if model_files(d2) != want:
            raise AssertionError("snapshot_download of the decoded source differs")
        return f"{len(got)} files decoded on the fly match"

    def e():
        def branches(refs):
            return sorted((r.name, r.ref, r.target_commit) for r in refs.branches)

        out = []
        for ep, rid in [(src_ep, repo), (dst_ep, mirror), (dst_ep, repo)]:
            api_e = HfApi(endpoint=ep, token=os.environ.get("HF_TOKEN"))
            sha = api_e.model_info(rid).sha
            refs = api_e.list_repo_refs(rid)
            want_main = ("main", "refs/heads/main", sha)
            if want_main not in branches(refs):
                raise AssertionError(f"{ep} {rid}: branches {branches(refs)} lack {want_main}")
            if refs.tags or refs.converts or refs.pull_requests is not None:
                raise AssertionError(f"{ep} {rid}: {refs}")
            with_prs = api_e.list_repo_refs(rid, include_pull_requests=True)
            if with_prs.pull_requests != [] or branches(with_prs) != branches(refs):
                raise AssertionError(f"{ep} {rid} with pull requests: {with_prs}")
            out.append(f"{rid} main={sha[:12]}")
        return ", ".join(out)

    def f():
        hub = urlsplit(src_ep)
        out = []
        n_lfs = 0
        for rel in want:
            p = hf_hub_download(repo, rel, cache_dir=str(tmp / "strict-cache"))
            if sha256(p) != want[rel]:
                raise AssertionError(f"{rel}: hf_hub_download gave other bytes")
            url = f"{src_ep}/{repo}/resolve/main/{rel}"
            st, h, _ = raw("HEAD", url, {"authorization": f"Bearer {os.environ['HF_TOKEN']}"})
            if st == 200:
                continue  # a regular file, served directly
            n_lfs += 1
            if st != 302:
                raise AssertionError(f"HEAD {rel}: {st}, expected 302")
            size = Path(args.model, rel).stat().st_size
            for k, v in [("x-linked-etag", f'"{want[rel]}"'), ("x-linked-size", str(size))]:
                if h.get(k) != v:
                    raise AssertionError(f"HEAD {rel}: {k} {h.get(k)!r} != {v!r}")
            for k in ["x-repo-commit", "etag", "location", "content-length"]:
                if k not in h:
                    raise AssertionError(f"HEAD {rel}: no {k} header: {h}")
            loc = urlsplit(h["location"])
            if (loc.hostname, loc.port) == (hub.hostname, hub.port):
                raise AssertionError(f"{rel}: Location {h['location']} is on the Hub listener")
            st, _, body = raw("GET", h["location"], {"authorization": "Bearer x"})
            if st != 400 or b"Only one auth mechanism" not in body:
                raise AssertionError(f"CDN took a token: {st} {body[:200]!r}")
            data = Path(args.model, rel).read_bytes()
            cut = [0, size // 3, 2 * size // 3, size]
            parts = []
            for a_, b_ in zip(cut, cut[1:]):
                st, h2, body = raw("GET", h["location"], {"range": f"bytes={a_}-{b_ - 1}"})
                if st != 206 or h2.get("content-range") != f"bytes {a_}-{b_ - 1}/{size}":
                    raise AssertionError(f"Range GET {rel}: {st} {h2}")
                parts.append(body)
            if b"".join(parts) != data:
                raise AssertionError(f"{rel}: Range parts differ from the file")
            if args.plain_get_cap is not None and size > args.plain_get_cap:
                st, _, body = raw("GET", h["location"])
                if st != 400:
                    raise AssertionError(f"plain GET over the cap: {st}")
            out.append(rel)
        if n_lfs == 0:
            raise AssertionError("no LFS file was redirected")
        return f"{len(want)} files; {n_lfs} through the CDN ({', '.join(out)}), token refused there, Range parts ok"

    def g():
        from huggingface_hub.utils import HfHubHTTPError, http_backoff, parse_ratelimit_headers

        ep = args.limited_endpoint
        lim = HfApi(endpoint=ep, token=False)
        err = None
        for _ in range(20):
            try:
                lim.model_info("referee/limited")
            except HfHubHTTPError as e:
                err = e
                break
        if err is None or err.response.status_code != 429:
            raise AssertionError(f"no 429 after 20 calls: {err!r}")
        h = err.response.headers
        info = parse_ratelimit_headers(h)
        if info is None or info.remaining != 0 or not 0 < info.reset_in_seconds <= 2:
            raise AssertionError(f"RateLimit headers not parsed: {dict(h)}")
        if "retry-after" in {k.lower() for k in h.keys()}:
            raise AssertionError("a 429 with Retry-After")
        t = time.time()
        r = http_backoff("GET", f"{ep}/api/models/referee/limited")
        if r.status_code != 200:
            raise AssertionError(f"after the window: {r.status_code}")
        return (f"429 with RateLimit {h.get('ratelimit')!r}, {h.get('ratelimit-policy')!r}; "
                f"http_backoff waited {time.time() - t:.1f}s and got 200")

    def h():
        from huggingface_hub.utils import HfHubHTTPError

        def names():
            return sorted(b.name for b in api.list_repo_refs(repo).branches)

        sha = api.model_info(repo).sha
        api.create_branch(repo, branch="brevis-work-referee")
        if names() != ["brevis-work-referee", "main"]:
            raise AssertionError(f"after create_branch: {names()}")
        api.delete_branch(repo, branch="brevis-work-referee")
        if names() != ["main"]:
            raise AssertionError(f"after delete_branch: {names()}")
        try:
            api.delete_branch(repo, branch="main")
        except HfHubHTTPError as e:
            refused = e.response.status_code
        else:
            raise AssertionError("delete_branch of main succeeded")
        if names() != ["main"] or api.model_info(repo).sha != sha:
            raise AssertionError(f"main moved: {names()}")
        return f"branch created and deleted; deleting main refused ({refused})"

    check("a: create_repo + upload_folder", a)
    if args.strict:
        check("a2: one-PUT LFS file and an empty file (strict)", a2)
    check("b: snapshot_download round trip", b)
    check("h: create_branch + delete_branch", h)
    if args.strict:
        check("f: hf_hub_download through the CDN redirect (strict)", f)
        if args.limited_endpoint:
            check("g: 429 with RateLimit, no Retry-After (strict)", g)
    if args.official_only:
        why = "--official-only (runs brevis-hub, or needs the mirror it makes)"
        skip("c: brevis mirror -> pull -> offline load", why)
        skip("d: source served decoded from the mirror", why)
        skip("e: list_repo_refs (source, mirror, decoded source)", why)
    else:
        check("c: brevis mirror -> pull -> offline load", c)
        check("d: source served decoded from the mirror", d)
        check("e: list_repo_refs (source, mirror, decoded source)", e)
    passed = sum(1 for _, ok in RESULTS if ok)
    failed = len(RESULTS) - passed
    print(f"{passed} passed, {failed} failed" + (f", {len(SKIPPED)} skipped" if SKIPPED else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
