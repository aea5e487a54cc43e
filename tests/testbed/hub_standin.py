"""A model-hub stand-in: enough of the Hugging Face Hub HTTP protocol for the REAL `hf download` /
`huggingface_hub.snapshot_download` (read from huggingface_hub 2.4.0) to fetch a repository at a fixed commit.

    python3 hub_standin.py --root DIR [--port 8080] [--log FILE] [--control FILE] [--commit SHA]

Serves every DIR/<org>/<name>/ as model repo <org>/<name>, all at one commit (40 hex, --commit); the
revision may be given as the full sha, a prefix of at least 7 characters (the real project pins
`fc694b54`-style short shas) or `main`. TEST CODE ONLY (the test bed's services host runs it on port 8080).

What the client requests, and what is answered:
  GET  /api/models/<repo>[/revision/<rev>]   sha, siblings (+ size, blobId, lfs with ?blobs=true)
  GET  /api/models/<repo>/tree/<rev>[/<dir>]  file listing (type, oid, size, path, lfs {oid, size, pointerSize});
                                              snapshot_download writes it to trees/<sha>.json in the cache
  HEAD /<repo>/resolve/<rev>/<path>           X-Repo-Commit, ETag (sha256 for LFS files *.safetensors etc.,
                                              git blob sha1 otherwise), Content-Length, X-Linked-Etag/-Size for
                                              LFS files, Accept-Ranges
  GET  same                                   the bytes; `Range: bytes=N-[M]` gives 206 + Content-Range
Errors carry X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) as the Hub does.

Test hooks, read from the --control JSON file on every request (write it, no restart needed):
  {"throttle_bps": {"model.safetensors": 100000},   # per-file send rate for GET bodies
   "drop_after": {"model.safetensors": 300000},     # close the connection after N body bytes of a GET
                                                    # without Range, once per change of the control file
   "gated": {"org/name": "manual"}}                 # model info says gated; its files answer 401 GatedRepo
                                                    # without an Authorization header
Every request is appended to --log as one JSON line when it ends ("event": "end": ts of its start, seconds,
method, repo, file, revision, range, status, bytes sent, size, complete, dropped, auth: whether an
`Authorization: Bearer` header came, never its value); a GET of a file also logs
"event": "start" when its body starts, so a test can interrupt a transfer in flight.
"""

import argparse
import hashlib
import json
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_COMMIT = "7e57bed05eed1a4c2f0b9d8e6a3c1f2e4d5b6a79"
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".onnx")
CHUNK = 16384
LAST_MODIFIED = "2025-01-01T00:00:00.000Z"


class Hub:
    def __init__(self, root, commit, log_path, control_path):
        self.root = Path(root)
        self.commit = commit
        self.log_path = Path(log_path) if log_path else None
        self.control_path = Path(control_path) if control_path else None
        self._meta = {}
        self._lock = threading.Lock()
        self._control = ({}, None)
        self._drops_done = set()

    # -------------------------------------------------------------- repository content
    def repo_dir(self, repo):
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
            return None
        path = self.root / repo
        return path if path.is_dir() else None

    def files(self, repo_dir):
        out = {}
        for path in sorted(repo_dir.rglob("*")):
            rel = path.relative_to(repo_dir).as_posix()
            if path.is_file() and not any(part.startswith(".") for part in rel.split("/")):
                out[rel] = self.meta(path)
        return out

    def meta(self, path):
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key in self._meta:
                return self._meta[key]
        data = path.read_bytes()
        lfs = path.name.endswith(LFS_SUFFIXES)
        info = {
            "path": path,
            "size": len(data),
            "lfs": lfs,
            "sha256": hashlib.sha256(data).hexdigest(),
            "blob_id": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
        }
        info["etag"] = info["sha256"] if lfs else info["blob_id"]
        with self._lock:
            self._meta[key] = info
        return info

    def resolve(self, revision):
        if revision in ("main", self.commit) or (len(revision) >= 7 and self.commit.startswith(revision.lower())):
            return self.commit
        return None

    # -------------------------------------------------------------- test hooks
    def control(self):
        if not self.control_path:
            return {}, None
        try:
            mtime = self.control_path.stat().st_mtime_ns
        except FileNotFoundError:
            return {}, None
        with self._lock:
            if self._control[1] != mtime:
                try:
                    self._control = (json.loads(self.control_path.read_text() or "{}"), mtime)
                except ValueError:
                    self._control = ({}, mtime)
            return self._control

    def take_drop(self, name, generation):
        with self._lock:
            if (name, generation) in self._drops_done:
                return False
            self._drops_done.add((name, generation))
            return True

    def log(self, entry):
        if not self.log_path:
            return
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock, open(self.log_path, "a", encoding="utf-8") as out:
            out.write(line)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hub-standin/1"
    hub: Hub = None

    def log_message(self, fmt, *args):  # quiet stderr; the JSON log is the record
        pass

    def do_HEAD(self):
        self.route(head=True)

    def do_GET(self):
        self.route(head=False)

    # -------------------------------------------------------------- routing
    def route(self, head):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = [unquote(p) for p in url.path.split("/") if p]
        self.entry = {
            "event": "end",
            "ts": round(time.time(), 3),
            "client": self.client_address[0],
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "range": self.headers.get("Range"),
            "auth": self.headers.get("Authorization", "").startswith("Bearer "),
            "user_agent": self.headers.get("User-Agent", ""),
            "bytes": 0,
            "complete": False,
            "dropped": False,
        }
        try:
            if parts[:1] == ["_standin"]:
                self.send_json({"ok": True, "commit": self.hub.commit})
            elif parts[:2] == ["api", "models"] and len(parts) >= 4:
                self.api(parts[2] + "/" + parts[3], parts[4:], query)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self.resolve_file(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), head)
            else:
                self.error(404, "EntryNotFound", f"no route for {url.path}")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.entry["seconds"] = round(time.time() - self.entry["ts"], 3)
            self.hub.log(self.entry)

    def api(self, repo, rest, query):
        self.entry["repo"] = repo
        repo_dir = self.hub.repo_dir(repo)
        if repo_dir is None:
            return self.error(404, "RepoNotFound", f"Repository {repo} not found")
        revision = "main"
        if rest[:1] in (["revision"], ["tree"]) and len(rest) >= 2:
            revision = rest[1]
        self.entry["revision"] = revision
        commit = self.hub.resolve(revision)
        if commit is None:
            return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}", commit=None)
        files = self.hub.files(repo_dir)
        if rest[:1] == ["tree"]:
            return self.send_json(self.tree(files, "/".join(rest[2:]), query), commit=commit)
        if rest and rest[:1] != ["revision"]:
            return self.error(404, "EntryNotFound", f"unsupported API path {'/'.join(rest)}", commit=commit)
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        expand = query.get("expand", []) + query.get("expand[]", [])
        siblings = []
        for name, info in files.items():
            sib = {"rfilename": name}
            if blobs or "siblings" in expand:
                sib.update(size=info["size"], blobId=info["blob_id"])
                if info["lfs"]:
                    sib["lfs"] = {"sha256": info["sha256"], "size": info["size"], "pointerSize": 134}
            siblings.append(sib)
        body = {
            "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
            "id": repo,
            "modelId": repo,
            "sha": commit,
            "author": repo.split("/")[0],
            "private": False,
            "gated": self.gated(repo) or False,
            "disabled": False,
            "lastModified": LAST_MODIFIED,
            "createdAt": LAST_MODIFIED,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "library_name": "transformers",
            "siblings": siblings,
            "usedStorage": sum(i["size"] for i in files.values()),
        }
        if expand:
            body = {k: v for k, v in body.items() if k in expand or k in ("_id", "id")}
        self.send_json(body, commit=commit)

    def gated(self, repo):
        """The control file's gating of `repo` ("auto", "manual") or None."""
        return self.hub.control()[0].get("gated", {}).get(repo)

    @staticmethod
    def tree(files, under, query):
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        prefix = under.strip("/") + "/" if under.strip("/") else ""
        entries, dirs = [], set()
        for name, info in files.items():
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if "/" in rest:
                parts = rest.split("/")
                for depth in range(1, len(parts) if recursive else 2):
                    dirs.add(prefix + "/".join(parts[:depth]))
                if not recursive:
                    continue
            entry = {"type": "file", "oid": info["blob_id"], "size": info["size"], "path": name}
            if info["lfs"]:
                entry["lfs"] = {"oid": info["sha256"], "size": info["size"], "pointerSize": 134}
            entries.append(entry)
        folders = [
            {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
            for d in sorted(dirs)
        ]
        return folders + entries

    def resolve_file(self, repo, revision, name, head):
        self.entry.update(repo=repo, revision=revision, file=name)
        repo_dir = self.hub.repo_dir(repo)
        if repo_dir is None:
            return self.error(404, "RepoNotFound", f"Repository {repo} not found")
        commit = self.hub.resolve(revision)
        if commit is None:
            return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if self.gated(repo) and not self.entry["auth"]:
            return self.error(401, "GatedRepo", f"Access to model {repo} is restricted", commit=commit)
        info = self.hub.files(repo_dir).get(name)
        if info is None:
            return self.error(404, "EntryNotFound", f"{name} does not exist at {commit}", commit=commit)
        size = info["size"]
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if not match or int(match.group(1)) >= size:
                self.entry["status"] = 416
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.send_header("X-Repo-Commit", commit)
                self.end_headers()
                return None
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            status = 206
        self.entry.update(status=status, size=size, start=start)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{info["etag"]}"')
        self.send_header("X-Repo-Commit", commit)
        if info["lfs"]:
            self.send_header("X-Linked-Etag", f'"{info["etag"]}"')
            self.send_header("X-Linked-Size", str(size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head:
            self.entry["complete"] = True
            return None
        control, generation = self.hub.control()
        rate = (control.get("throttle_bps") or {}).get(name)
        drop_at = (control.get("drop_after") or {}).get(name) if not wanted else None
        if drop_at is not None and not self.hub.take_drop(name, generation):
            drop_at = None
        self.hub.log(dict(self.entry, event="start", ts=round(time.time(), 3)))
        with open(info["path"], "rb") as src:
            src.seek(start)
            left, began = end - start + 1, time.monotonic()
            while left > 0:
                chunk = src.read(min(CHUNK, left, max(1, int(rate / 10)) if rate else CHUNK))
                if not chunk:
                    break
                if drop_at is not None and self.entry["bytes"] + len(chunk) > drop_at:
                    chunk = chunk[: max(0, drop_at - self.entry["bytes"])]
                    self.wfile.write(chunk)
                    self.entry["bytes"] += len(chunk)
                    self.wfile.flush()
                    self.entry["dropped"] = True
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return None
                self.wfile.write(chunk)
                self.entry["bytes"] += len(chunk)
                left -= len(chunk)
                if rate:
                    ahead = self.entry["bytes"] / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
        self.entry["complete"] = left == 0
        return None

    # -------------------------------------------------------------- responses
    def send_json(self, data, commit=None):
        body = json.dumps(data).encode()
        self.entry["status"] = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.entry["complete"] = True

    def error(self, status, code, message, commit=None):
        body = json.dumps({"error": message}).encode()
        self.entry.update(status=status, error=code)
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--log")
    parser.add_argument("--control")
    args = parser.parse_args()
    if not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        parser.error("--commit must be 40 lowercase hex digits")
    if args.log:
        os.makedirs(os.path.dirname(os.path.abspath(args.log)), exist_ok=True)
    Handler.hub = Hub(args.root, args.commit, args.log, args.control)
    server = ThreadingHTTPServer((args.bind, args.port), Handler)
    server.daemon_threads = True
    print(f"hub-standin serving {args.root} at commit {args.commit} on {args.bind}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
