"""The filter service: a Unix socket that answers the Lua shim with the rules' decision.

- The socket is mode 0600 and owned by slurmctld's user (``owner``), so only slurmctld reaches it.
- A fixed pool of ``filter.max_concurrent`` worker threads; connections beyond what the pool and
  its queue hold, or a request that cannot get a slot within the shim's timeout, are answered
  ``error``/busy (the shim then follows its failure mode).
- One malformed request, or a rule that raises, gives an ``error`` answer for that request only.
- SIGHUP reloads the site config (a bad file is logged and the old config kept); SIGTERM/SIGINT stop.
- One log line per decision.

Quotas count live jobs (the rules are pure, so the counts come in as data): a background thread
re-reads Slurm's pending and running jobs, and the accounts each user may name (Slurm's
associations, where slurmdbd keeps them), every ``filter.live_refresh_seconds`` (outside
slurmctld's job lock) and counts each user's tagged deadline jobs and GPUs per class; jobs this
service accepted since that read started are added on top until the next read shows them (or
not: a job cancelled, or one whose answer came after the shim's timeout, is not counted).
"""

from __future__ import annotations

import logging
import os
import pwd
import queue
import select
import socket
import signal
import socketserver
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from slurm_dl.core.arrays import parse_array
from slurm_dl.core.config import SiteConfig
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import ConfigError, SlurmDLError
from slurm_dl.core.rules import FilterContext, FilterDecision, decide
from slurm_dl.core.model import Job, Topology
from slurm_dl.core.live import UserLive, live_counts
from slurm_dl.core.tags import parse_tag

from .protocol import MAX_REQUEST_BYTES, answer_line, error_answer, reject_answer

log = logging.getLogger("slurm_dl.filter")
# How long the accepting thread waits for a just-connected client's line before handing it to a worker.
INLINE_WAIT_S = 0.002
PEEK_BYTES = 65536  # a larger request (rare) goes to a worker


class FilterServiceError(SlurmDLError, OSError):
    """The filter service cannot start (socket path, owner)."""


class LiveView:
    """Per-user counts of live jobs (see the module text). Thread-safe."""

    def __init__(
        self, fetch: Callable[[], list[Job]] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[str, UserLive] = {}
        # (at, user, class, gpus, deadline, tasks)
        self._recent: list[tuple[float, str, str, int, float | None, int]] = []
        self.refreshed_at: float | None = None

    def refresh(self) -> None:
        """Re-read the live jobs (raises what the fetch raises; the old counts stay then)."""
        if self._fetch is None:
            return
        started = self._clock()
        counts = live_counts(self._fetch())
        with self._lock:
            self._counts = counts
            self._recent = [r for r in self._recent if r[0] >= started]
            self.refreshed_at = started

    def add(
        self, user: str, job_class: str, gpus: int, deadline: float | None, tasks: int = 1
    ) -> None:
        with self._lock:
            self._recent.append((self._clock(), user, job_class, gpus, deadline, tasks))

    def of(self, user: str, now: float) -> UserLive:
        with self._lock:
            base = self._counts.get(user)
            out = UserLive(base.deadline_jobs, dict(base.class_gpus)) if base else UserLive()
            for _, who, job_class, gpus, deadline, tasks in self._recent:
                if who == user:
                    out.add(job_class, gpus, deadline is not None and deadline > now, tasks)
        return out


def _user_key(job: Mapping[str, Any], uid: int | None) -> str:
    name = job.get("user_name")
    if isinstance(name, str) and name:
        return name
    return f"uid:{uid if uid is not None else job.get('user_id', '?')}"


class FilterService:
    """Decides jobs with the current config; ``decide_job`` is what each request runs."""

    def __init__(
        self,
        config_path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        metrics=None,
        fetch: Callable[[], list[Job]] | None = None,
        topology_fetch: Callable[[], Topology] | None = None,
        associations_fetch: Callable[[], frozenset[tuple[str, str]] | None] | None = None,
    ) -> None:
        self.config_path = Path(config_path)
        self.metrics = metrics  # jobsubmit.metrics.FilterMetrics, or None
        self.config: SiteConfig = load_config(self.config_path)
        self.clock = clock
        self.live = LiveView(fetch)
        self._topology_fetch = topology_fetch
        self._associations_fetch = associations_fetch
        # user -> the accounts Slurm's associations let them name; None: no slurmdbd, unchecked
        self.accounts_by_user: dict[str, frozenset[str]] | None = None
        self.leaf_nodes: tuple[tuple[str, ...], ...] | None = (
            None  # Slurm's leaf switches, once read
        )
        self.slots = threading.BoundedSemaphore(self.config.filter.max_concurrent)
        self.decisions = 0

    def reload(self) -> bool:
        try:
            self.config = load_config(self.config_path)
        except ConfigError as e:
            log.error(
                "config reload failed, keeping the previous config: %s", str(e).replace("\n", " ")
            )
            if self.metrics is not None:
                self.metrics.reloads.labels("failed").inc()
            return False
        log.info("config reloaded from %s", self.config_path)
        if self.metrics is not None:
            self.metrics.reloads.labels("ok").inc()
        return True

    def decide_job(self, job: Mapping[str, Any], uid: int | None) -> FilterDecision:
        started = time.perf_counter()
        config = self.config
        user = _user_key(job, uid)
        now = self.clock()
        held = self.live.of(user, now)
        by_user = self.accounts_by_user
        accounts = None if by_user is None else by_user.get(user, frozenset())
        ctx = FilterContext(
            now=now,
            user_deadline_jobs=held.deadline_jobs,
            user_class_gpus=held.class_gpus,
            leaf_nodes=self.leaf_nodes,
            user_accounts=accounts,
        )
        decision = decide(job, config, ctx)
        if decision.accepted:
            tag = parse_tag(decision.changes.get("admin_comment"))
            if tag is not None:
                spec = parse_array(
                    job.get("array_inx") if isinstance(job.get("array_inx"), str) else None
                )
                ends = (
                    tag.soft_deadlines[-1][0] if tag.soft_deadlines else tag.deadline
                )  # a soft one: its last step
                self.live.add(user, tag.job_class.value, tag.gpus, ends, spec.tasks if spec else 1)
        self.decisions += 1
        took = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.decided(decision, took)
        log.info("decision %s ms=%.3f", decision.summary, took * 1000)
        return decision

    def refresh_topology(self) -> None:
        """Re-read Slurm's switch tree (topology source "slurm"; raises what the fetch raises)."""
        if self._topology_fetch is not None and self.config.topology.source == "slurm":
            self.leaf_nodes = self._topology_fetch().leaf_nodes()

    def refresh_associations(self) -> None:
        """Re-read the (user, account) associations (raises what the fetch raises)."""
        if self._associations_fetch is not None:
            pairs = self._associations_fetch()
            if pairs is None:
                self.accounts_by_user = None
                return
            by_user: dict[str, set[str]] = {}
            for user, account in pairs:
                by_user.setdefault(user, set()).add(account)
            self.accounts_by_user = {u: frozenset(a) for u, a in by_user.items()}

    def run_background(self, stop: threading.Event) -> None:
        """Keep the live-job counts and the switch tree fresh until ``stop`` (Slurm down or slow:
        the last ones stay; one log line when reading fails and one when it works again)."""
        failing: set[str] = set()
        while not stop.is_set():
            for what, step in (
                ("live jobs", self.live.refresh),
                ("the switch tree", self.refresh_topology),
                ("the accounts", self.refresh_associations),
            ):
                try:
                    step()
                    if what in failing:
                        log.info("%s readable again", what)
                    failing.discard(what)
                except Exception as e:  # noqa: BLE001 - keep serving with the last view
                    if what not in failing:
                        log.warning("cannot read %s (using the last one): %s", what, str(e)[:200])
                    failing.add(what)
            stop.wait(self.config.filter.live_refresh_seconds)

    def handle_line(self, raw: bytes) -> bytes:
        """The answer to one request line (never raises); bounded by the concurrency slots."""
        if not self.slots.acquire(timeout=self.config.filter.timeout_ms / 1000):
            log.warning(
                "busy: %d decisions in flight, answered error", self.config.filter.max_concurrent
            )
            if self.metrics is not None:
                self.metrics.failed("busy")
            return error_answer("busy")
        try:
            answer, _, error = answer_line(
                raw, self.decide_job, self._shim_report if self.metrics is not None else None
            )
        finally:
            self.slots.release()
        if error is not None:
            log.warning("error %s", error)
            if self.metrics is not None:
                self.metrics.failed("error")
        return answer

    def _shim_report(self, message: Mapping[str, Any]) -> None:
        n = message.get("shim_failures")
        if n:
            log.warning(
                "the shim could not reach the service for %s submission(s) (failure mode %s)",
                n,
                message.get("failure_mode", "?"),
            )
        self.metrics.shim_report(message)


class _Handler(socketserver.StreamRequestHandler):
    timeout = 5.0  # a client that stalls mid-request loses only its own thread

    def handle(self) -> None:
        service: FilterService = self.server.service  # type: ignore[attr-defined]
        try:
            while True:
                raw = self.rfile.readline(MAX_REQUEST_BYTES + 1)
                if not raw:
                    return
                if len(raw) > MAX_REQUEST_BYTES and not raw.endswith(b"\n"):
                    self.wfile.write(reject_answer(f"request over {MAX_REQUEST_BYTES} bytes"))
                    return
                self.wfile.write(service.handle_line(raw.rstrip(b"\r\n")))
                self.wfile.flush()
        except OSError:
            return  # client went away or timed out


class _Server(socketserver.UnixStreamServer):
    """Accepts on the main thread; a fixed pool of worker threads answers the connections.

    At most ``pool`` connections are answered at once and at most ``pool`` more wait; a
    connection beyond that is answered ``busy`` at once (the shim then follows its failure mode).
    A fixed pool avoids starting a thread per submission, which costs more than the decision.
    """

    request_queue_size = 128

    def __init__(self, path: str, pool: int):
        super().__init__(path, _Handler)
        self._queue: queue.Queue = queue.Queue(maxsize=pool)
        self._workers = [
            threading.Thread(target=self._work, daemon=True, name=f"filter-{i}")
            for i in range(pool)
        ]
        for w in self._workers:
            w.start()

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        head = self._complete_line_waiting(request)
        if head:
            # The usual case: the shim sent its one line right after connecting. Answer it on this
            # thread (a hand-off to a worker costs more than the decision), then let a worker
            # watch the connection for further lines or its close, off the shim's critical path.
            try:
                raw = request.recv(len(head))
                request.sendall(self.service.handle_line(raw.rstrip(b"\r\n")))  # type: ignore[attr-defined]
            except OSError:
                self.shutdown_request(request)
                return
        self._hand_to_worker(request, client_address, answered=bool(head))

    def _hand_to_worker(self, request, client_address, answered: bool) -> None:
        try:
            self._queue.put_nowait((request, client_address))
        except queue.Full:
            if not answered:
                try:
                    request.sendall(error_answer("busy"))
                except OSError:
                    pass
            self.shutdown_request(request)

    @staticmethod
    def _complete_line_waiting(request: socket.socket) -> bytes:
        """The client's first request line if it has fully arrived (peeked, not consumed), else b""."""
        try:
            ready, _, _ = select.select([request], [], [], INLINE_WAIT_S)
            if not ready:
                return b""
            request.setblocking(False)
            try:
                head = request.recv(PEEK_BYTES, socket.MSG_PEEK)
            finally:
                request.setblocking(True)
        except OSError:
            return b""
        end = head.find(b"\n")
        return head[: end + 1] if end >= 0 else b""

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:  # noqa: BLE001 - a broken connection must not end the worker
                log.exception("connection failed")
            finally:
                self.shutdown_request(request)

    def server_close(self) -> None:
        """Stop accepting, let the workers answer what they hold, and wait for them (bounded).

        A worker still answering after close would log into whatever replaced the log stream
        and hold a half-closed connection; waiting at most one handler timeout avoids both.
        """
        super().server_close()
        deadline = time.monotonic() + _Handler.timeout + 1.0
        for _ in self._workers:
            try:
                self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:
                break
        for w in self._workers:
            w.join(max(0.0, deadline - time.monotonic()))


def _prepare_socket_path(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FilterServiceError(f"{path}: exists and is not a socket; refusing to replace it")
    path.unlink()


def open_server(
    service: FilterService, socket_path: str | Path, owner: str | None = None
) -> _Server:
    """Bind the socket (mode 0600, owned by ``owner`` when given) and return the server, not yet serving."""
    path = Path(socket_path)
    if len(os.fsencode(path)) >= 108:
        raise FilterServiceError(f"{path}: socket path longer than 107 bytes")
    _prepare_socket_path(path)
    old_umask = os.umask(0o177)
    try:
        server = _Server(str(path), service.config.filter.max_concurrent)
    except OSError as e:
        raise FilterServiceError(f"{path}: cannot listen: {e.strerror or e}") from None
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    if owner:
        try:
            pw = pwd.getpwnam(owner)
        except KeyError:
            server.server_close()
            raise FilterServiceError(
                f"socket owner {owner!r} is not a user on this machine"
            ) from None
        os.chown(path, pw.pw_uid, pw.pw_gid)
    server.service = service  # type: ignore[attr-defined]
    return server


def serve(
    config_path: str | Path,
    socket_path: str | Path | None = None,
    owner: str | None = None,
    metrics_port: int | None = None,
    backend: str | None = None,
) -> None:
    """Run the service in the foreground until SIGTERM/SIGINT; SIGHUP reloads the config.
    ``metrics_port``: serve Prometheus metrics there (None: the config's filter.metrics_port);
    ``backend``: the Slurm backend (None: the config's ``[slurm] backend``; a reload keeps it)."""
    from slurm_dl.cli.backend_opt import build_backend
    from slurm_dl.daemon.sd_notify import notify
    from slurm_dl.slurm.accounts import slurm_associations

    # one reader for the background thread: its memo keeps the queue's lines, the switch tree
    # is read at most once a minute
    slurm = build_backend(load_config(Path(config_path)), backend, topology_ttl_s=60.0)
    service = FilterService(
        config_path,
        fetch=slurm.jobs,
        topology_fetch=slurm.topology,
        associations_fetch=lambda: slurm_associations().pairs,
    )
    path = Path(socket_path or service.config.filter.socket)
    port = metrics_port if metrics_port is not None else service.config.filter.metrics_port
    if port is not None:
        from slurm_dl.daemon.metrics_http import serve_metrics

        from .metrics import FilterMetrics

        service.metrics = FilterMetrics()
        endpoint = serve_metrics(
            service.metrics.registry, port, service.config.filter.metrics_address
        )
        log.info("metrics on http://%s:%d/metrics", endpoint.address, endpoint.port)
    # Handlers go in before the socket exists: a SIGTERM right after start must still remove it
    # (a stale socket file would make the shim connect to nothing until the next start).
    holder: dict[str, _Server] = {}
    stop_requested = threading.Event()

    def _stop(*_: Any) -> None:
        stop_requested.set()
        if "server" in holder:
            threading.Thread(target=holder["server"].shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGHUP, lambda *_: service.reload())
    from slurm_dl.daemon.process_memory import snapshot_on_signal

    if (where := snapshot_on_signal("filter")) is not None:
        log.info("tracing allocations: SIGUSR1 writes a memory snapshot to %s", where)
    server = holder["server"] = open_server(service, path, owner)
    if stop_requested.is_set():
        server.server_close()
        path.unlink(missing_ok=True)
        return
    threading.Thread(
        target=service.run_background, args=(stop_requested,), daemon=True, name="live-view"
    ).start()
    log.info(
        "filter service listening on %s (config %s, %s backend, pid %d)",
        path,
        config_path,
        slurm.name,
        os.getpid(),
    )
    notify(f"READY=1\nSTATUS=listening on {path}")  # Type=notify: slurmctld may start now
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        notify("STOPPING=1")
        server.server_close()
        try:
            path.unlink()
        except OSError:
            pass
        log.info("filter service stopped after %d decisions", service.decisions)
