"""A small HTTP server with hard bounds, for the daemons' endpoints (metrics, explain).

Those endpoints listen where ordinary users reach them, and the daemons behind them need their
file descriptors: the prioritizer's cycle runs Slurm commands and opens its database, the filter
service accepts slurmctld's connections on its socket. A thread per connection without limits
(``http.server``, prometheus_client's server) let one user's 1,000 idle connections take every
descriptor. This server bounds what any client can hold:

- one thread accepts and reads every connection's request head without blocking (selectors);
- at most ``max_connections`` connections are open at once. A connection that arrives at the cap
  closes the one that has waited longest without sending a complete request head (a client that
  asks at once is never the oldest for long, so a flood of idle connections cannot lock real
  requests out); when none is waiting (all are being answered) the new one is closed at once;
- the request head must arrive whole within ``head_timeout_s`` of connecting (trickling does not
  extend it) and fit ``max_head_bytes`` (else 431); a request with a body is refused (413); only
  GET and HEAD are served (else 405);
- a fixed pool of ``workers`` threads runs the handler and writes the answer, within
  ``write_timeout_s``; a complete request that finds the pool and its short queue full is
  answered 503 at once;
- one request per connection (``Connection: close``).

So an endpoint holds at most ``max_connections`` + 3 descriptors (listener, wake-up pair),
whatever clients do, and shares no lock with the daemon's own work.
"""

from __future__ import annotations

import errno
import http
import logging
import queue
import re
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

log = logging.getLogger("slurm_dl.http")

MAX_CONNECTIONS = 32  # open connections per endpoint (a scraper or a few users ask at a time)
HEAD_TIMEOUT_S = 5.0  # from connect to the end of the request head
MAX_HEAD_BYTES = 8192  # request line + headers (a MUNGE credential is a few hundred bytes)
WRITE_TIMEOUT_S = 5.0  # to write the whole answer
WORKERS = 2  # threads that run the handler
QUEUE = 4  # complete requests waiting for a worker
BACKLOG = 1024  # connections the kernel holds for us before we accept (kernel memory, not our descriptors)
ACCEPT_BATCH = 64  # accepts per wake-up, so expired connections are closed even under a storm
ACCEPT_PAUSE_S = 0.5  # when the process is out of descriptors, stop accepting this long
HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path and query, as sent
    headers: Mapping[str, str]  # names in lower case


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class Refused(Exception):
    """A request head this server does not serve: answered with ``response`` and closed."""

    def __init__(
        self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.response = Response(status, (message + "\n").encode(), headers=headers)


def encode_response(r: Response, head_only: bool = False) -> bytes:
    try:
        reason = http.HTTPStatus(r.status).phrase
    except ValueError:
        reason = ""
    lines = [
        f"HTTP/1.1 {r.status} {reason}",
        f"Content-Type: {r.content_type}",
        f"Content-Length: {len(r.body)}",
        "Connection: close",
    ]
    lines += [f"{k}: {v}" for k, v in r.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else r.body)


def parse_head(head: bytes) -> Request:
    """The request in ``head`` (request line and headers, without the blank line); raises Refused."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1]:
        raise Refused(400, "bad request line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.rstrip("\r").partition(":")
        if not sep or not name or name != name.strip():
            raise Refused(400, "bad header line")
        headers[name.lower()] = value.strip()
    if method not in ("GET", "HEAD"):
        raise Refused(405, "only GET and HEAD", (("Allow", "GET, HEAD"),))
    if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
        raise Refused(413, "request bodies are not accepted")
    return Request(method, target, headers)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _refuse(sock: socket.socket, response: Response) -> None:
    """Answer from the accepting thread without waiting (small answers fit the send buffer), close."""
    try:
        sock.setblocking(False)
        sock.send(encode_response(response))
    except OSError:
        pass
    _close(sock)


def _send_all(sock: socket.socket, data: bytes, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    view = memoryview(data)
    while view:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("answer not taken in time")
        sock.settimeout(left)
        view = view[sock.send(view) :]


def _listen(address: str, port: int) -> socket.socket:
    family, _, _, _, where = socket.getaddrinfo(
        address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class _Waiting:
    deadline: float
    buf: bytearray = field(default_factory=bytearray)


class BoundedHTTPServer:
    """Serves ``handler(Request) -> Response`` on ``address:port`` with the bounds above, in its
    own threads, from construction until ``close()``. Raises OSError when it cannot listen."""

    def __init__(
        self,
        address: str,
        port: int,
        handler: Callable[[Request], Response],
        *,
        name: str = "http",
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        max_head_bytes: int = MAX_HEAD_BYTES,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        workers: int = WORKERS,
    ) -> None:
        self.handler, self.name = handler, name
        self.max_connections, self.head_timeout_s = max_connections, head_timeout_s
        self.max_head_bytes, self.write_timeout_s = max_head_bytes, write_timeout_s
        # connections closed without a normal answer, by why (since start; the accepting thread counts)
        self.closed_early = {"cap": 0, "idle": 0, "refused": 0, "busy": 0}
        self._reported = dict(self.closed_early)
        self._listener = _listen(address, port)
        self.address, self.port = address, self._listener.getsockname()[1]
        self._waiting: dict[
            socket.socket, _Waiting
        ] = {}  # in accept order: the first is the oldest
        self._busy = 0  # handed to the workers (queued or being answered)
        self._lock = threading.Lock()
        self._jobs: queue.Queue = queue.Queue(maxsize=QUEUE)
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._paused_until = 0.0
        self._pause_logged_at = -60.0
        self._reported_at = time.monotonic()
        self._workers = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        self._loop = threading.Thread(target=self._run, name=f"{name}-accept", daemon=True)
        for t in (*self._workers, self._loop):
            t.start()

    # -- the accepting thread ------------------------------------------------------------------

    def open_connections(self) -> int:
        with self._lock:
            return len(self._waiting) + self._busy

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self._step()
                except Exception:  # noqa: BLE001 - the endpoint must outlive any one connection
                    log.exception("%s endpoint: unexpected error (serving on)", self.name)
                    time.sleep(0.1)
        finally:
            for sock in list(self._waiting):
                self._forget(sock)
                _close(sock)
            self._sel.close()
            _close(self._listener)

    def _step(self) -> None:
        now = time.monotonic()
        timeout = 1.0
        if self._waiting:
            timeout = min(timeout, max(0.0, next(iter(self._waiting.values())).deadline - now))
        if self._paused_until:
            timeout = min(timeout, max(0.0, self._paused_until - now))
        for key, _ in self._sel.select(timeout):
            if key.fileobj is self._listener:
                self._accept()
            elif key.fileobj is self._wake_r:
                self._wake_r.recv(64)
            else:
                self._read(key.fileobj)  # type: ignore[arg-type]
        now = time.monotonic()
        self._expire(now)
        if self._paused_until and now >= self._paused_until:
            self._paused_until = 0.0
            self._sel.register(self._listener, selectors.EVENT_READ)
        self._report(now)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    now = time.monotonic()
                    if (
                        now - self._pause_logged_at >= 60.0
                    ):  # the process is short of them: say so, not often
                        self._pause_logged_at = now
                        log.warning(
                            "%s endpoint: cannot accept (%s); pausing accepts %.1f s at a time",
                            self.name,
                            e.strerror,
                            ACCEPT_PAUSE_S,
                        )
                    self._sel.unregister(self._listener)
                    self._paused_until = now + ACCEPT_PAUSE_S
                    return
                continue  # the client went away before we took it
            self._admit(sock)

    def _admit(self, sock: socket.socket) -> None:
        while self.open_connections() >= self.max_connections and self._waiting:
            oldest = next(iter(self._waiting))
            self._read(oldest)  # its request may have arrived since the last look
            if oldest in self._waiting:
                self._forget(oldest)
                _close(oldest)
                self.closed_early["cap"] += 1
        if self.open_connections() >= self.max_connections:  # every one is being answered
            self.closed_early["busy"] += 1
            _close(sock)
            return
        sock.setblocking(False)
        with self._lock:
            self._waiting[sock] = _Waiting(time.monotonic() + self.head_timeout_s)
        self._sel.register(sock, selectors.EVENT_READ)

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._waiting.pop(sock, None)
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _expire(self, now: float) -> None:
        while self._waiting:
            sock, w = next(iter(self._waiting.items()))
            if w.deadline > now:
                return
            self._forget(sock)
            _close(sock)
            self.closed_early["idle"] += 1

    def _read(self, sock: socket.socket) -> None:
        w = self._waiting.get(sock)
        if w is None:
            return
        try:
            chunk = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._forget(sock)
            _close(sock)
            return
        w.buf += chunk
        end = HEAD_END.search(w.buf)
        if end is None and len(w.buf) <= self.max_head_bytes:
            return
        self._forget(sock)
        if end is None or end.start() > self.max_head_bytes:
            self.closed_early["refused"] += 1
            _refuse(sock, Response(431, b"request head too large\n"))
            return
        try:
            request = parse_head(bytes(w.buf[: end.start()]))
        except Refused as e:
            self.closed_early["refused"] += 1
            _refuse(sock, e.response)
            return
        with self._lock:
            self._busy += 1
        try:
            self._jobs.put_nowait((sock, request))
        except queue.Full:
            with self._lock:
                self._busy -= 1
            self.closed_early["busy"] += 1
            _refuse(sock, Response(503, b"busy; ask again\n", headers=(("Retry-After", "1"),)))

    def _report(self, now: float) -> None:
        """One warning a minute at most while connections are being closed unanswered."""
        if now - self._reported_at < 60.0:
            return
        self._reported_at = now
        new = {k: n - self._reported.get(k, 0) for k, n in self.closed_early.items()}
        self._reported = dict(self.closed_early)
        if any(new.values()):
            log.warning(
                "%s endpoint: closed connections unanswered in the last minute: %s (at most %d open, "
                "%.0f s for a request head)",
                self.name,
                ", ".join(f"{n} {k}" for k, n in new.items() if n),
                self.max_connections,
                self.head_timeout_s,
            )

    # -- the workers -----------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            sock, request = item
            try:
                try:
                    response = self.handler(request)
                except Exception:  # noqa: BLE001 - one failed answer, not a dead endpoint
                    log.exception(
                        "%s endpoint: %s %s failed", self.name, request.method, request.target[:200]
                    )
                    response = Response(500, b"internal error\n")
                _send_all(
                    sock,
                    encode_response(response, head_only=request.method == "HEAD"),
                    self.write_timeout_s,
                )
            except OSError:
                pass  # the client went away or did not read in time
            finally:
                _close(sock)
                with self._lock:
                    self._busy -= 1

    def close(self) -> None:
        """Stop accepting, close every connection, and stop the threads (bounded waits)."""
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._loop.join(5.0)
        for _ in self._workers:
            try:
                self._jobs.put(None, timeout=self.write_timeout_s)
            except queue.Full:
                break
        for t in self._workers:
            t.join(self.write_timeout_s)
        _close(self._wake_r)
        _close(self._wake_w)
