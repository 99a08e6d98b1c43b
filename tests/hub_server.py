"""A local server shaped like the Hugging Face Hub, for pull tests: the
endpoints `huggingface_hub` calls to list a model repository and download its
files, over real HTTP, with the hub's headers (ETag, X-Repo-Commit,
X-Linked-Etag/Size) and Range requests.

    with HubServer() as hub:               # HF_ENDPOINT=hub.url
        hub.add_repo("acme/tiny", {"config.json": b"...", "model.gguf": data})
        hub.cut["model.gguf"] = 1000       # drop the connection after 1000 bytes (then 503 until cleared)
        hub.corrupt.add("model.gguf")      # serve other bytes than the listing's sha256 promises
        hub.sent["model.gguf"]             # body bytes served so far
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_FROM = 4096  # files this large are listed as LFS files (sha256); smaller ones by git blob id
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    def __init__(self):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.licenses: dict[str, str] = {}
        self.cut: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.sent: dict[str, int] = {}
        self.ranges: list[str] = []
        self.pace = 0.0  # seconds to wait after each 16 KiB of a body (0: as fast as it goes)
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self._broken: set[str] = set()
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def add_repo(self, repo: str, files: dict[str, bytes], license: str | None = None) -> None:
        self.repos[repo] = dict(files)
        if license:
            self.licenses[repo] = license

    def reset(self) -> None:
        with self._lock:
            self.cut.clear(), self.corrupt.clear(), self.sent.clear(), self.ranges.clear(), self._broken.clear()
            self.authorizations.clear()

    def __enter__(self) -> "HubServer":
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- what the hub says --------------------------------------------------------
    def info(self, repo: str) -> dict:
        siblings = []
        for name, data in self.repos[repo].items():
            entry = {"rfilename": name, "size": len(data), "blobId": _git_blob_id(data)}
            if len(data) >= LFS_FROM:
                entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(entry)
        card = {"license": self.licenses[repo]} if repo in self.licenses else {}
        return {"_id": repo, "id": repo, "modelId": repo, "sha": COMMIT, "private": False, "siblings": siblings,
                "cardData": card, "tags": []}

    def body(self, repo: str, name: str) -> bytes:
        data = self.repos[repo][name]
        if name in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        return data


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):  # a client that left: expected
            super().handle_error(request, client_address)


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


_INFO = re.compile(r"^/api/models/([^/]+/[^/]+?)(?:/revision/([^/?]+))?(?:\?.*)?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+?)(?:\?.*)?$")


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self._answer(head=False)

        def do_HEAD(self):
            self._answer(head=True)

        def _answer(self, head: bool):
            hub.authorizations.append(self.headers.get("Authorization"))
            info = _INFO.match(self.path)
            if info and info.group(1) in hub.repos:
                return self._json(200, hub.info(info.group(1)))
            resolve = _RESOLVE.match(self.path)
            if resolve and resolve.group(1) in hub.repos and resolve.group(3) in hub.repos[resolve.group(1)]:
                return self._file(resolve.group(1), resolve.group(3), head)
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self._json_body({"error": "Repository not found"})

        def _json(self, status: int, body: dict):
            self.send_response(status)
            self._json_body(body)

        def _json_body(self, body: dict):
            data = json.dumps(body).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _file(self, repo: str, name: str, head: bool):
            if name in hub._broken:
                return self._json(503, {"error": "unavailable"})
            data = hub.body(repo, name)
            real = hub.repos[repo][name]
            start = 0
            wanted = self.headers.get("Range")
            if wanted:
                hub.ranges.append(f"{name} {wanted}")
                start = int(re.match(r"bytes=(\d+)-", wanted).group(1))
            self.send_response(206 if start else 200)
            etag = hashlib.sha256(real).hexdigest() if len(real) >= LFS_FROM else _git_blob_id(real)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Repo-Commit", COMMIT)
            if len(real) >= LFS_FROM:
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(len(real)))
            self.send_header("Accept-Ranges", "bytes")
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            if head:
                return
            body = data[start:]
            cut = hub.cut.get(name)
            if cut is not None and cut - start < len(body):
                body = body[:max(cut - start, 0)]
                hub._broken.add(name)  # the retry that follows finds the file unavailable
                self.close_connection = True
            for start in range(0, len(body), 16384) if hub.pace else [0]:
                piece = body[start:start + 16384] if hub.pace else body
                self.wfile.write(piece)
                self.wfile.flush()
                with hub._lock:
                    hub.sent[name] = hub.sent.get(name, 0) + len(piece)
                time.sleep(hub.pace)

    return Handler


def small_gguf(path, file_type: int = 15, rows: int = 64) -> bytes:
    """A GGUF file with a header as a converter writes it (llama architecture,
    file type Q4_K_M by default, a chat template, a licence) and one F32 tensor
    of `rows` x 1024: enough bytes to cut a download in the middle of."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(2048)
    writer.add_file_type(file_type)
    writer.add_string("general.license", "apache-2.0")
    writer.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}{{ tools }}{% endif %}")
    writer.add_tensor("token_embd.weight", np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()
