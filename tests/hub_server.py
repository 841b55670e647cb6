"""A loopback Hugging Face Hub for tests: serves a directory as a model repo.

It speaks the part of the Hub HTTP protocol that ``huggingface_hub`` (2.x) uses to list and
download a model repo:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: JSON with ``id``,
  ``sha`` and ``siblings``;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=...``: the tree, paginated with a
  ``Link: <...>; rel="next"`` header when ``page_size`` is set;
- ``POST /api/models/{repo}/paths-info/{rev}`` (form fields ``paths``, ``expand``): the
  entries for the given paths;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: the file, with ``X-Repo-Commit``, an
  ``ETag`` per content (``X-Linked-Etag``/``X-Linked-Size`` for LFS-sized files), the true
  ``Content-Length`` and ``Range`` support (206);
- 404s carry ``X-Error-Code``: ``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``.

Listings describe files as huggingface.co does: a file at least :data:`LFS_THRESHOLD` bytes
is an LFS file, whose entry has ``lfs: {oid: <sha256 of the content>, size, pointerSize}``
and whose ``oid`` is the git blob id of its *pointer* file; the others' ``oid`` is the git
blob id of their content. Xet storage is not advertised (no ``xetHash``, no
``X-Xet-Hash``): the client's Xet path needs a CAS server this does not implement.

Every request is recorded (:attr:`HubServer.requests`, with its ``User-Agent``), and faults
can be injected: :meth:`truncate` (a short body announced as complete, as a broken proxy
would), :meth:`corrupt` (the right length, wrong bytes), :meth:`cut` (the connection drops
mid-body), :meth:`fail` (HTTP errors), :meth:`throttle` (a slow link) and :meth:`hold` (a
body stops mid-file until released, so a client can be killed there).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

DEFAULT_REPO = "alem-world/alem-rl-baselines"
LFS_THRESHOLD = 100_000  # files at least this big are listed as LFS files
_CHUNK = 16 * 1024  # bodies are written in chunks of this size (throttle, hold)


@dataclass(frozen=True)
class Request:
    method: str
    url_path: str  # as sent, unquoted
    query: dict[str, list[str]]
    repo_path: str | None  # the file, for /resolve/ requests
    range: str | None
    user_agent: str = ""


@dataclass(frozen=True)
class _File:
    path: str
    size: int
    sha256: str
    git_oid: str

    @property
    def lfs(self) -> bool:
        return self.size >= LFS_THRESHOLD

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid

    @property
    def pointer(self) -> bytes:
        """The git-lfs pointer file stored in git in place of an LFS file."""
        return (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
            f"size {self.size}\n"
        ).encode()

    def entry(self) -> dict:
        """The file's entry in a tree / paths-info listing, as huggingface.co writes it."""
        if not self.lfs:
            return {"type": "file", "path": self.path, "size": self.size, "oid": self.git_oid}
        pointer = self.pointer
        return {
            "type": "file",
            "path": self.path,
            "size": self.size,
            "oid": hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest(),
            "lfs": {"oid": self.sha256, "size": self.size, "pointerSize": len(pointer)},
        }


@lru_cache(maxsize=8)
def _scan(root: Path, include: tuple[str, ...] | None) -> dict[str, _File]:
    files = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(root).as_posix()
        if include is not None and not rel.startswith(include):
            continue
        data = p.read_bytes()
        files[rel] = _File(
            rel,
            len(data),
            hashlib.sha256(data).hexdigest(),
            hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
        )
    return files


class HubServer:
    """``with HubServer(root) as hub: ... hub.url ...`` serves ``root`` as ``repo``."""

    def __init__(
        self,
        root: str | Path,
        *,
        repo: str = DEFAULT_REPO,
        revisions: tuple[str, ...] = ("main",),
        page_size: int | None = None,
        include: tuple[str, ...] | None = None,
    ):
        self.root = Path(root)
        self.repo = repo
        self.files = dict(_scan(self.root.resolve(), include))
        listing = "".join(f"{f.path}\0{f.git_oid}\n" for f in self.files.values())
        self.commit = hashlib.sha1(listing.encode()).hexdigest()
        self.revisions = {r: self.commit for r in revisions} | {self.commit: self.commit}
        self.page_size = page_size
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._truncate: dict[str, list[int]] = {}  # path -> [bytes kept, GETs left]
        self._corrupt: dict[str, int] = {}  # path -> GETs left
        self._cut: dict[str, list[int]] = {}  # path -> [bytes sent, GETs left]
        self._fail: list[list] = []  # [substring, status, times left]
        self._throttle: tuple[str, float] | None = None  # (substring, bytes per second)
        self._hold: dict[str, dict] = {}  # path -> {after, heads, timeout, held: Event}
        self._release = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> HubServer:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- faults ----------------------------------------------------------------------------
    def truncate(self, path: str, keep: int = 0, times: int = 1) -> None:
        """Serve only ``keep`` bytes of ``path`` (HEAD and GET agree) for the next ``times``
        GETs."""
        self._truncate[path] = [keep, times]

    def cut(self, path: str, at: int, times: int = 1) -> None:
        """Announce the full length but drop the connection after ``at`` bytes."""
        self._cut[path] = [at, times]

    def fail(self, times: int = 1, status: int = 500, match: str = "") -> None:
        """Answer the next ``times`` requests whose path contains ``match`` with ``status``."""
        self._fail.append([match, status, times])

    def corrupt(self, path: str, times: int = 1) -> None:
        """Serve ``path`` with its length but one byte changed for the next ``times`` GETs."""
        self._corrupt[path] = times

    def throttle(self, bytes_per_second: float, match: str = "") -> None:
        """Send the bodies of files whose path contains ``match`` at about this rate."""
        self._throttle = (match, float(bytes_per_second))

    def hold(
        self, path: str, after: int, *, until_heads: int | None = None, timeout: float = 30.0
    ) -> None:
        """The next GET of ``path`` sends ``after`` bytes, then waits: for :meth:`release`, for
        the ``until_heads``-th HEAD of ``path`` (another client about to fetch it), or for
        ``timeout`` seconds; then it sends the rest (if the client is still there)."""
        self._hold[path] = {
            "after": after,
            "heads": until_heads,
            "timeout": timeout,
            "held": threading.Event(),
        }

    def wait_held(self, path: str, timeout: float = 30.0) -> bool:
        """Block until a GET of ``path`` is being held (see :meth:`hold`)."""
        return self._hold[path]["held"].wait(timeout)

    def release(self) -> None:
        self._release.set()

    # -- inspection ------------------------------------------------------------------------
    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def count(self, method: str, repo_path: str) -> int:
        with self._lock:
            return sum(r.method == method and r.repo_path == repo_path for r in self.requests)

    def file_requests(self, method: str = "GET") -> list[str]:
        """Repo paths requested through ``/resolve/`` with ``method``."""
        with self._lock:
            return [r.repo_path for r in self.requests if r.method == method and r.repo_path]

    def files_under(self, prefix: str) -> dict[str, int]:
        return {p: f.size for p, f in self.files.items() if p.startswith(prefix.rstrip("/") + "/")}

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def _take_fail(self, path: str) -> int | None:
        with self._lock:
            for f in self._fail:
                if f[2] > 0 and f[0] in path:
                    f[2] -= 1
                    return f[1]
        return None


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    # -- plumbing --------------------------------------------------------------------------
    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        content_length: int | None = None,
    ) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        length = len(body) if content_length is None else content_length
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, obj, headers: dict[str, str] | None = None) -> None:
        self._send(
            200, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})}
        )

    def _error(
        self, status: int, code: str | None, message: str, headers: dict[str, str] | None = None
    ) -> None:
        h = {"Content-Type": "application/json", "X-Error-Message": message, **(headers or {})}
        if code:
            h["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), h)

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._form = parse_qs(body.decode())
        self._dispatch()

    # -- routing ---------------------------------------------------------------------------
    def _dispatch(self) -> None:
        hub = self.hub
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        repo_path = None
        prefix = f"/{hub.repo}/resolve/"
        if path.startswith(prefix):
            rest = path[len(prefix) :]
            repo_path = rest.split("/", 1)[1] if "/" in rest else ""
        hub._record(
            Request(
                self.command,
                path,
                query,
                repo_path,
                self.headers.get("Range"),
                self.headers.get("User-Agent", ""),
            )
        )
        status = hub._take_fail(path)
        if status is not None:
            return self._error(status, None, f"injected failure {status}")
        api = f"/api/models/{hub.repo}"
        if path.startswith("/api/models/"):
            if not (path == api or path.startswith(api + "/")):
                return self._error(404, "RepoNotFound", "Repository not found")
            return self._api(path[len(api) :], query)
        if path.startswith("/api/"):
            return self._error(404, None, "Not found")
        if "/resolve/" in path and not path.startswith(prefix):
            return self._error(404, "RepoNotFound", "Repository not found")
        if repo_path is not None:
            rev, _, file_path = path[len(prefix) :].partition("/")
            return self._resolve(rev, file_path)
        return self._error(404, None, "Not found")

    def _commit(self, rev: str) -> str | None:
        return self.hub.revisions.get(unquote(rev))

    def _api(self, rest: str, query: dict[str, list[str]]) -> None:
        hub = self.hub
        if rest in ("", "/"):
            rev = "main"
        elif rest.startswith("/revision/"):
            rev = rest[len("/revision/") :]
        elif rest.startswith("/tree/"):
            rev, _, sub = rest[len("/tree/") :].partition("/")
            if self._commit(rev) is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return self._tree(rev, sub, query)
        elif rest.startswith("/paths-info/") and self.command == "POST":
            rev = rest[len("/paths-info/") :]
            if self._commit(rev) is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return self._paths_info(getattr(self, "_form", {}).get("paths", []))
        else:
            return self._error(404, None, "Not found")
        commit = self._commit(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        self._json(
            {
                "id": hub.repo,
                "modelId": hub.repo,
                "sha": commit,
                "private": False,
                "disabled": False,
                "gated": False,
                "tags": ["reinforcement-learning", "jax"],
                "lastModified": "2026-06-27T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in hub.files],
            }
        )

    def _tree(self, rev: str, sub: str, query: dict[str, list[str]]) -> None:
        hub = self.hub
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        base = sub.strip("/")
        entries: dict[str, dict] = {}
        for f in hub.files.values():
            if base and not f.path.startswith(base + "/"):
                continue
            rel = f.path[len(base) + 1 :] if base else f.path
            segs = rel.split("/")
            dirs = ["/".join(segs[:i]) for i in range(1, len(segs))]
            if not recursive:
                dirs = dirs[:1]
            for d in dirs:
                full = f"{base}/{d}" if base else d
                entries.setdefault(
                    full,
                    {
                        "type": "directory",
                        "path": full,
                        "oid": hashlib.sha1(full.encode()).hexdigest(),
                    },
                )
            if recursive or len(segs) == 1:
                entries[f.path] = f.entry()
        if base and not entries:
            return self._error(404, "EntryNotFound", f"{base} does not exist on {rev}")
        items = [entries[k] for k in sorted(entries)]
        headers = {}
        if hub.page_size:
            start = int(query.get("cursor", ["0"])[0])
            end = start + hub.page_size
            if end < len(items):
                q = f"recursive={str(recursive).lower()}&expand=false&cursor={end}"
                url = (
                    f"http://{self.headers['Host']}/api/models/{hub.repo}/tree/"
                    f"{quote(rev, safe='')}"
                )
                url += f"/{quote(base)}" if base else ""
                headers["Link"] = f'<{url}?{q}>; rel="next"'
            items = items[start:end]
        self._json(items, headers)

    def _paths_info(self, paths: list[str]) -> None:
        """Entries for existing paths (files, or folders holding files); others are left out."""
        hub = self.hub
        out = []
        for p in paths:
            p = p.strip("/")
            if p in hub.files:
                out.append(hub.files[p].entry())
            elif any(f.startswith(p + "/") for f in hub.files):
                out.append(
                    {"type": "directory", "path": p, "oid": hashlib.sha1(p.encode()).hexdigest()}
                )
        self._json(out)

    def _resolve(self, rev: str, file_path: str) -> None:
        hub = self.hub
        commit = self._commit(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        f = hub.files.get(file_path)
        if f is None:
            return self._error(
                404, "EntryNotFound", f"{file_path} does not exist", {"X-Repo-Commit": commit}
            )
        data = (hub.root / f.path).read_bytes()
        hold = None
        with hub._lock:
            trunc = hub._truncate.get(f.path)
            cut = hub._cut.get(f.path)
            if trunc and trunc[1] > 0:
                data = data[: trunc[0]]
                trunc[1] -= self.command == "GET"
            if hub._corrupt.get(f.path, 0) > 0 and self.command == "GET":
                data = data[:-1] + bytes([data[-1] ^ 0xFF])
                hub._corrupt[f.path] -= 1
            h = hub._hold.get(f.path)
            if h is not None and self.command == "GET" and not h.get("used"):
                h["used"] = True
                hold = h
            cut_at = None
            if cut and cut[1] > 0 and self.command == "GET" and not self.headers.get("Range"):
                cut_at = cut[0]
                cut[1] -= 1
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{f.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if f.lfs:
            headers |= {"X-Linked-Etag": f'"{f.etag}"', "X-Linked-Size": str(len(data))}
        status, body = 200, data
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and self.command == "GET":
            lo, _, hi = rng[len("bytes=") :].partition("-")
            lo_i = int(lo or 0)
            hi_i = int(hi) if hi else len(data) - 1
            if lo_i >= len(data):
                return self._error(
                    416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{len(data)}"}
                )
            body = data[lo_i : hi_i + 1]
            status = 206
            headers["Content-Range"] = f"bytes {lo_i}-{lo_i + len(body) - 1}/{len(data)}"
        if cut_at is not None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:cut_at])
            self.wfile.flush()
            self.close_connection = True
            return
        rate = hub._throttle[1] if hub._throttle and hub._throttle[0] in f.path else None
        if self.command == "HEAD" or (rate is None and hold is None):
            return self._send(status, body, headers)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self._stream(f.path, body, rate, hold)
        except OSError:  # the client went away (killed): nothing more to send
            self.close_connection = True

    def _stream(self, path: str, body: bytes, rate: float | None, hold: dict | None) -> None:
        sent = 0
        while sent < len(body):
            end = min(len(body), sent + _CHUNK)
            if hold is not None and sent < hold["after"] <= end:
                end = hold["after"]
            self.wfile.write(body[sent:end])
            self.wfile.flush()
            if rate:
                time.sleep((end - sent) / rate)
            sent = end
            if hold is not None and sent == hold["after"]:
                self._wait(path, hold)

    def _wait(self, path: str, hold: dict) -> None:
        hub = self.hub
        hold["held"].set()
        deadline = time.monotonic() + hold["timeout"]
        while time.monotonic() < deadline and not hub._release.is_set():
            if hold["heads"] is not None and hub.count("HEAD", path) >= hold["heads"]:
                return
            time.sleep(0.02)
