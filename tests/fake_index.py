"""A package index on 127.0.0.1 for the dataset tests: PEP 691 JSON project pages and archive files, served by
http.server in a thread; plus the tar.gz writer the tests build their archives with."""
import contextlib
import gzip
import hashlib
import http.server
import io
import json
import tarfile
import threading

from sparkdl.datasets.registries import SIMPLE_JSON, ArchiveSpec

__all__ = ["FakeIndex", "serve_index", "targz", "archive_of"]


def targz(members, level=9):
    """Bytes of a .tar.gz holding ``members`` ({path: bytes}), the same bytes for the same members (mtime 0).

    With ``level=0`` (stored, not compressed) members of the same sizes give archives of the same size."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=level, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def archive_of(filename, data):
    """The :class:`ArchiveSpec` pinning ``data``."""
    return ArchiveSpec(filename, len(data), hashlib.sha256(data).hexdigest())


class FakeIndex:
    """Routes ``path -> (content type, body)``; ``requests`` records ``(path, Accept header)`` of every GET."""

    def __init__(self, base):
        self.base = base
        self.url = base + "/simple/"
        self.routes = {}
        self.requests = []

    def add_project(self, project, files, listed_sha256=None, content_type=SIMPLE_JSON):
        """Serve ``files`` ({filename: bytes}) under /files/ and the project page listing them.

        ``listed_sha256`` ({filename: hex or None}) overrides the hash the page lists (None: no hash listed)."""
        listed_sha256 = listed_sha256 or {}
        entries = []
        for filename, data in files.items():
            self.routes[f"/files/{filename}"] = ("application/octet-stream", data)
            sha = listed_sha256.get(filename, hashlib.sha256(data).hexdigest())
            entries.append({"filename": filename, "url": f"../../files/{filename}",
                            "hashes": {} if sha is None else {"sha256": sha}})
        page = {"meta": {"api-version": "1.1"}, "name": project, "files": entries}
        self.routes[f"/simple/{project}/"] = (content_type, json.dumps(page).encode())


@contextlib.contextmanager
def serve_index():
    """A :class:`FakeIndex` listening on 127.0.0.1 (a free port) for the duration of the block."""
    index = None

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            index.requests.append((self.path, self.headers.get("Accept")))
            if self.path not in index.routes:
                self.send_error(404)
                return
            kind, body = index.routes[self.path]
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    index = FakeIndex(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
