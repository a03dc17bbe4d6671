"""A real HTTP server on 127.0.0.1 speaking OpenAI's ``POST /v1/embeddings`` (LocalEmbedder inside).

Used to test :class:`ctxret.embedders.OpenAIEmbedder` with the real ``openai`` client: requests,
``dimensions`` (Matryoshka truncation of the 384-d local vector), ``encoding_format`` ``float``
and ``base64`` (the client asks for base64 unless told otherwise), ``usage``, and failures on
demand (N x 429 with ``Retry-After``, 500, slow answers past the client's timeout), and malformed
answers on demand (:meth:`FakeOpenAI.inject`: HTTP 200 with truncated JSON, HTML, an empty body,
no ``data``, the wrong number of vectors, missing or duplicate ``index``, vectors of another size,
NaN/inf/zero vectors, base64 garbage; a connection reset or closed in the middle of the body; a
hang). Faults are a queue -- "the next N answers are X" -- then it answers normally again, or
:meth:`FakeOpenAI.inject_always` for a server that never recovers. Like OpenAI it rejects with
400 a request of more than ``max_inputs`` inputs or ``max_bytes`` bytes, an empty string input,
and an input over the model's token limit. Every request is recorded.

It only ever binds and talks to 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from ctxret.blend import truncate_dims
from ctxret.embedders.local import LocalEmbedder


@dataclass
class Recorded:
    """One request the server received (whatever it answered)."""

    n_inputs: int
    n_bytes: int
    dimensions: int | None
    encoding_format: str | None
    model: str | None
    authorization: str | None
    status: int = 0


#: Malformed answers :meth:`FakeOpenAI.inject` can give (all HTTP 200 except ``reset``/``hang``).
FAULT_KINDS = (
    "truncated",  # the JSON body cut in half
    "html",  # a text/html page (a proxy's or a login page)
    "empty",  # no body at all
    "no_data",  # a JSON object without "data"
    "wrong_count",  # one vector fewer than inputs
    "missing_index",  # one item without "index"
    "duplicate_index",  # two items with index 0
    "wrong_dims",  # every vector has ``dims`` numbers (default 512)
    "ragged",  # the first vector is one number short
    "nan",  # a NaN in the first vector
    "inf",  # an infinity in the first vector
    "zero",  # the first vector is all zeros
    "bad_base64",  # an "embedding" string that is not base64
    "base64_bytes",  # base64 of a byte count that is not a whole number of float32s
    "reset",  # headers and half the body, then a TCP reset
    "cut",  # headers and half the body, then a clean close (the client sees a short body)
    "hang",  # no answer for ``seconds`` (default 30), then a normal one
    "floats",  # not a fault: lists of numbers although base64 was asked for (as some servers do)
)


@dataclass
class _Fault:
    status: int = 0  # 0: answer normally
    delay: float = 0.0
    retry_after: str | None = None
    kind: str = ""  # one of FAULT_KINDS, or "" for none
    dims: int = 512


@dataclass
class Raw:
    """An answer given as raw bytes: the body, its type, and where to cut the TCP stream."""

    body: bytes
    content_type: str = "application/json"
    #: Announce the whole body but send only this many bytes, then reset the connection.
    reset_after: int | None = None
    #: With ``reset_after``: close cleanly (FIN) instead of resetting (RST).
    clean_close: bool = False


@dataclass
class FakeOpenAI:
    """State and behaviour of the server; the handler reads it. Thread-safe."""

    embedder: LocalEmbedder
    max_inputs: int = 2048
    max_bytes: int = 300_000
    requests: list[Recorded] = field(default_factory=list)
    faults: deque[_Fault] = field(default_factory=deque)
    always: _Fault | None = None
    url: str = ""
    #: Requests being answered right now, and the most there ever were at once.
    in_flight: int = 0
    max_in_flight: int = 0
    _cache: dict[str, np.ndarray] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- controls --------------------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.faults.clear()
            self.always = None
            self.max_in_flight = self.in_flight

    def fail_next(self, count: int, status: int, retry_after: str | None = None) -> None:
        """Answer the next ``count`` requests with ``status`` (optionally with ``Retry-After``)."""
        with self._lock:
            self.faults.extend(_Fault(status=status, retry_after=retry_after) for _ in range(count))

    def slow_next(self, count: int, seconds: float) -> None:
        """Wait ``seconds`` before answering each of the next ``count`` requests."""
        with self._lock:
            self.faults.extend(_Fault(delay=seconds) for _ in range(count))

    def fail_always(self, status: int) -> None:
        with self._lock:
            self.always = _Fault(status=status)

    def answer_next(self, count: int) -> None:
        """Answer the next ``count`` requests normally (to put a fault later in the queue)."""
        with self._lock:
            self.faults.extend(_Fault() for _ in range(count))

    def inject(self, kind: str, count: int = 1, *, dims: int = 512, seconds: float = 30.0) -> None:
        """Give the answer ``kind`` (see :data:`FAULT_KINDS`) to the next ``count`` requests."""
        fault = self._fault(kind, dims=dims, seconds=seconds)
        with self._lock:
            self.faults.extend(fault for _ in range(count))

    def inject_always(self, kind: str, *, dims: int = 512, seconds: float = 30.0) -> None:
        """Give the malformed answer ``kind`` to every request (after any queued faults)."""
        fault = self._fault(kind, dims=dims, seconds=seconds)
        with self._lock:
            self.always = fault

    @staticmethod
    def _fault(kind: str, *, dims: int, seconds: float) -> _Fault:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; choose one of {', '.join(FAULT_KINDS)}")
        return _Fault(kind=kind, dims=dims, delay=seconds if kind == "hang" else 0.0)

    # -- behaviour -------------------------------------------------------------------------------

    def _next_fault(self) -> _Fault | None:
        with self._lock:
            if self.faults:
                return self.faults.popleft()
            return self.always

    def vectors(self, texts: list[str]) -> np.ndarray:
        """Local vectors for ``texts``, memoised (tests send the same texts many times)."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            fresh = self.embedder.embed(missing)
            with self._lock:
                self._cache.update(zip(missing, fresh, strict=True))
        with self._lock:
            return np.stack([self._cache[t] for t in texts])

    def handle(self, body: dict, record: Recorded) -> tuple[int, dict | Raw, dict[str, str]]:
        """Status, JSON body (or :class:`Raw` bytes) and extra headers for one request."""
        fault = self._next_fault()
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.kind in ("html", "empty", "no_data"):
            if fault.kind == "html":
                page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
                return 200, Raw(page, "text/html; charset=utf-8"), {}
            if fault.kind == "empty":
                return 200, Raw(b""), {}
            return 200, {"object": "list", "model": body.get("model", "")}, {}
        if fault is not None and fault.status:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            kind = "rate_limit_exceeded" if fault.status == 429 else "server_error"
            return fault.status, _error(f"injected failure {fault.status}", kind), headers
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs) or not inputs:
            return 400, _error("'input' must be a string or a non-empty array of strings"), {}
        if len(inputs) > self.max_inputs:
            return 400, _error(f"'input' array must have at most {self.max_inputs} items"), {}
        if record.n_bytes > self.max_bytes:
            return 400, _error(f"request too large: {record.n_bytes} bytes > {self.max_bytes}"), {}
        if any(t == "" for t in inputs):
            return 400, _error("'$.input' is invalid: empty string"), {}
        counts = self.embedder.count_tokens(inputs)
        for i, count in enumerate(counts):
            if count > self.embedder.max_tokens:
                return (
                    400,
                    _error(f"input {i} has {count} tokens, over {self.embedder.max_tokens}"),
                    {},
                )
        vectors = self.vectors(inputs)
        dimensions = body.get("dimensions")
        if dimensions is not None:
            if not isinstance(dimensions, int) or not 1 <= dimensions <= vectors.shape[1]:
                return 400, _error(f"invalid dimensions {dimensions!r}"), {}
            vectors = truncate_dims(vectors, dimensions).astype(np.float32)
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            return 400, _error(f"invalid encoding_format {fmt!r}"), {}
        data = []
        # Answer in reverse order: clients must put vectors back by their "index" field.
        for i in reversed(range(len(inputs))):
            vec = vectors[i].astype("<f4")
            payload = base64.b64encode(vec.tobytes()).decode() if fmt == "base64" else vec.tolist()
            data.append({"object": "embedding", "index": i, "embedding": payload})
        tokens = int(sum(counts))
        payload = {
            "object": "list",
            "data": data,
            "model": body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if fault is not None and fault.kind:
            return 200, _corrupt(payload, fault, vectors, fmt), {}
        return 200, payload, {}


def _corrupt(payload: dict, fault: _Fault, vectors: np.ndarray, fmt: str) -> dict | Raw:
    """The answer ``payload`` spoilt the way ``fault`` says (``vectors``: the right ones)."""
    data = payload["data"]  # in reverse index order: data[-1] is input 0

    def encode(vec: np.ndarray) -> str | list[float]:
        vec = np.asarray(vec, dtype="<f4")
        return base64.b64encode(vec.tobytes()).decode() if fmt == "base64" else vec.tolist()

    kind = fault.kind
    if kind in ("truncated", "reset", "cut"):
        whole = json.dumps(payload).encode()
        half = len(whole) // 2
        if kind == "truncated":
            return Raw(whole[:half])
        return Raw(whole, reset_after=half, clean_close=kind == "cut")
    if kind == "wrong_count":
        del data[0]
    elif kind == "missing_index":
        del data[0]["index"]
    elif kind == "duplicate_index":
        if len(data) > 1:
            data[0]["index"] = data[-1]["index"]
        else:
            data.append(dict(data[0]))
    elif kind == "wrong_dims":
        for item in data:
            item["embedding"] = encode(np.resize(vectors[item["index"]], fault.dims))
    elif kind in ("nan", "inf", "zero", "ragged"):
        vec = np.array(vectors[0], dtype=np.float32)
        if kind == "nan":
            vec[0] = np.nan
        elif kind == "inf":
            vec[0] = np.inf
        elif kind == "zero":
            vec[:] = 0.0
        else:
            vec = vec[:-1]
        data[-1]["embedding"] = encode(vec)
    elif kind == "floats":
        for item in data:
            item["embedding"] = np.asarray(vectors[item["index"]], dtype="<f4").tolist()
    elif kind == "bad_base64":
        data[-1]["embedding"] = "%%% not base64 %%%"
    elif kind == "base64_bytes":
        data[-1]["embedding"] = base64.b64encode(b"\x01" * 1001).decode()
    return payload


def _error(message: str, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _handler(state: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            return

        def _send(self, status: int, payload: dict | Raw, headers: dict[str, str]) -> None:
            raw = payload if isinstance(payload, Raw) else Raw(json.dumps(payload).encode())
            data = raw.body
            try:
                self.send_response(status)
                self.send_header("Content-Type", raw.content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if raw.reset_after is None:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[: raw.reset_after])
                self.wfile.flush()
                if raw.clean_close:
                    self.connection.shutdown(socket.SHUT_WR)
                else:  # SO_LINGER 0: closing sends a TCP RST, not a FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def finish(self) -> None:
            try:
                super().finish()
            except OSError:
                pass  # the connection was reset on purpose

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self._send(400, _error("body is not a JSON object"), {})
                return
            inputs = body.get("input")
            texts = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
            record = Recorded(
                n_inputs=len(texts),
                n_bytes=sum(len(t.encode("utf-8")) for t in texts if isinstance(t, str)),
                dimensions=body.get("dimensions"),
                encoding_format=body.get("encoding_format"),
                model=body.get("model"),
                authorization=self.headers.get("Authorization"),
            )
            with state._lock:  # recorded on arrival (a slow answer may never be read)
                state.requests.append(record)
            if self.path.rstrip("/") != "/v1/embeddings":
                status, payload, headers = 404, _error(f"no route {self.path}"), {}
            else:
                with state._lock:
                    state.in_flight += 1
                    state.max_in_flight = max(state.max_in_flight, state.in_flight)
                try:
                    status, payload, headers = state.handle(body, record)
                finally:
                    with state._lock:
                        state.in_flight -= 1
            record.status = status
            self._send(status, payload, headers)

    return Handler


@contextmanager
def serve(embedder: LocalEmbedder, **limits: int) -> Iterator[FakeOpenAI]:
    """Run the server on a free port of 127.0.0.1 in a background thread; stop it on exit."""
    state = FakeOpenAI(embedder=embedder, **limits)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    server.block_on_close = False
    host, port = server.server_address[:2]
    state.url = f"http://{host}:{port}/v1"
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
