"""The worker side: handlers run under ffd's worker protocol (HTTP, JSON;
docs/worker-protocol.md), served by `ffd run --worker-api`.

A Worker claims executions of its lanes, runs the handler registered for
each one's kind on one of its handler threads, renews the lease while it
runs (the heartbeat), and completes or fails it fenced on the claim's
epoch. A lease lost while the handler runs (the execution was cancelled,
or the lease expired) sets job.cancelled, at once through the protocol's
watch call: Python cannot stop a thread, so a long handler checks it
(job.check(), job.sleep()) and returns.
"""

import base64
import dataclasses
import http.client
import inspect
import json
import logging
import queue
import socket
import threading
import time
import traceback
import urllib.parse
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from .errors import FfdError, LeaseLostError, ProtocolError, from_fields

log = logging.getLogger("ffd")


class Cancelled(Exception):
    """Raised by Job.check and Job.sleep once the lease is lost."""


class Permanent(Exception):
    """Raise it (or raise from it) to fail the execution without a retry."""


@dataclasses.dataclass
class Job:
    """One claimed execution, as a handler sees it."""

    id: str
    epoch: int
    attempt: int
    max_attempts: int
    lane: str
    kind: str
    namespace: str
    flow_id: Optional[str]
    step: str
    payload: Any
    upstreams: Dict[str, Any]
    lease_ttl: float
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)
    lost: Optional[LeaseLostError] = None

    def check(self) -> None:
        """Raise Cancelled once the lease is lost."""
        if self.cancelled.is_set():
            raise Cancelled(str(self.lost) if self.lost else "lease lost")

    def sleep(self, seconds: float) -> None:
        """Sleep, or raise Cancelled as soon as the lease is lost."""
        if self.cancelled.wait(seconds):
            self.check()


Handler = Callable[..., Any]


class Worker:
    """Runs handlers for lanes through the worker protocol at url.

    handlers maps a kind to a callable taking (job) or (job, payload);
    when the payload parameter is annotated with a dataclass, the payload
    is decoded into it, and a dataclass returned is encoded as JSON. The
    kind "*" takes every kind without a handler of its own.

    heartbeat is how often a running handler's lease is renewed (default
    a third of the lease). A cancel reaches a running handler at once
    through the protocol's watch call, and at its next renewal at the
    latest.
    """

    def __init__(self, url: str, token: str, lanes: Union[str, Iterable[str]], handlers: Optional[Dict[str, Handler]] = None, *,
                 concurrency: int = 4, worker_id: str = "", capabilities: Iterable[str] = (), claim_wait: float = 5.0,
                 heartbeat: Optional[float] = None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.url = url.rstrip("/")
        self._path = (urllib.parse.urlsplit(self.url).path or "") + "/v1/worker/"
        self.token = token
        self.lanes: List[str] = [lanes] if isinstance(lanes, str) else list(lanes)
        if not self.lanes:
            raise ValueError("a worker needs at least one lane")
        self.handlers: Dict[str, Handler] = dict(handlers or {})
        self.concurrency = concurrency
        self.worker_id = worker_id or f"py:{socket.gethostname()}/{uuid.uuid4().hex[:8]}"
        self.capabilities = list(capabilities)
        self.claim_wait = claim_wait
        self.heartbeat = heartbeat
        self._stop = threading.Event()
        self._handler_threads: List[threading.Thread] = []
        self._claimers: List[threading.Thread] = []
        self._beat: Optional[threading.Thread] = None
        self._watcher: Optional[threading.Thread] = None
        self._queue: "queue.Queue[Optional[Job]]" = queue.Queue()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._running: Dict[str, Any] = {}
        self._conns: List[http.client.HTTPConnection] = []

    def handler(self, kind: str) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of kind."""
        def register(fn: Handler) -> Handler:
            self.handlers[kind] = fn
            return fn
        return register

    # The protocol.

    def _conn(self) -> http.client.HTTPConnection:
        # One kept-alive connection per thread: a request reuses it.
        c = getattr(self._local, "conn", None)
        if c is None:
            u = urllib.parse.urlsplit(self.url)
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            c = self._local.conn = cls(u.hostname, u.port, timeout=60)
            with self._lock:
                self._conns.append(c)
        return c

    def _post(self, op: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + self.token}
        for retry in (False, True):
            c = self._conn()
            c.timeout = timeout
            try:
                c.request("POST", self._path + op, body=data, headers=headers)
                resp = c.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                # A kept-alive connection the server closed: once more on
                # a new one.
                c.close()
                self._local.conn = None
                if retry:
                    raise
        if resp.status == 200:
            return json.loads(raw)
        try:
            fields = json.loads(raw)["error"]
        except (ValueError, KeyError, TypeError):
            raise ProtocolError(f"{op}: HTTP {resp.status}: {raw[:200]!r}") from None
        raise from_fields(fields)

    def claim(self, lane: str, wait: float, max: int = 1) -> List[Job]:
        out = self._post("claim", {"lane": lane, "worker": self.worker_id, "capabilities": self.capabilities,
                                   "max": max, "wait_ms": int(wait * 1000)}, timeout=wait + 30)
        return [self._job(x) for x in out["executions"]]

    @staticmethod
    def _job(x: Dict[str, Any]) -> Job:
        payload = x.get("payload")
        if x.get("payload_base64"):
            payload = base64.b64decode(x["payload_base64"])
        return Job(id=x["id"], epoch=x["epoch"], attempt=x["attempt"], max_attempts=x["max_attempts"], lane=x["lane"],
                   kind=x["kind"], namespace=x["namespace"], flow_id=x.get("flow_id"), step=x.get("step", ""),
                   payload=payload, upstreams=x.get("upstreams") or {}, lease_ttl=x["lease_ttl_ms"] / 1000.0)

    def renew(self, job: Job) -> None:
        self._post("renew", {"id": job.id, "epoch": job.epoch}, timeout=30)

    def complete(self, job: Job, result: Any) -> Dict[str, Any]:
        return self._post("complete", {"id": job.id, "epoch": job.epoch, "result": result}, timeout=30)

    def fail(self, job: Job, error: str, retryable: bool = True) -> Dict[str, Any]:
        return self._post("fail", {"id": job.id, "epoch": job.epoch, "error": error[:16000], "retryable": retryable}, timeout=30)

    # Running: a claimer per lane claims as many executions as there are
    # free handler threads (up to 100 a claim), the handler threads run
    # them, and one heartbeat thread renews the leases of those running.

    def start(self) -> None:
        """Start the worker's threads."""
        self._slots = threading.Semaphore(self.concurrency)
        self._handler_threads = [self._spawn(self._handle, f"ffd-handler-{i}") for i in range(self.concurrency)]
        self._claimers = [self._spawn(lambda lane=lane: self._claim_loop(lane), f"ffd-claim-{lane}") for lane in self.lanes]
        self._beat = self._spawn(self._heartbeat, "ffd-heartbeat")
        self._watcher = self._spawn(self._watch, "ffd-watch")

    @staticmethod
    def _spawn(target: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        return t

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming, run what was claimed, and wait (up to timeout)
        for the handlers to end."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._claimers:
            t.join(max(0.0, deadline - time.monotonic()))
        # What the claimers queued runs before these ends.
        for _ in self._handler_threads:
            self._queue.put(None)
        for t in self._handler_threads + [t for t in (self._beat, self._watcher) if t]:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()

    def run(self) -> None:
        """start, then block until stop is called from another thread (or Ctrl-C)."""
        self.start()
        try:
            while not self._stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        self.stop()

    def _claim_loop(self, lane: str) -> None:
        pause = 0.1
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            free = 1
            while free < 100 and self._slots.acquire(blocking=False):
                free += 1
            try:
                jobs = self.claim(lane, min(self.claim_wait, 30.0), max=free)
                pause = 0.1
            except (OSError, FfdError) as err:
                jobs = []
                log.warning("ffd: claim on lane %s failed, retrying in %.1fs: %s", lane, pause, err)
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
            for _ in range(free - len(jobs)):
                self._slots.release()
            for job in jobs:
                self._queue.put(job)

    def _handle(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                self._run(job)
            finally:
                self._slots.release()

    def _run(self, job: Job) -> None:
        with self._lock:
            self._running[job.id] = (job, time.monotonic() + self._every(job))
        try:
            result = self._call(job)
        except Cancelled:
            return
        except Permanent as err:
            self._end(job, lambda: self.fail(job, str(err) or repr(err), retryable=False))
        except Exception as err:  # a handler's failure is the execution's, retried
            detail = "".join(traceback.format_exception_only(type(err), err)).strip()
            self._end(job, lambda: self.fail(job, detail))
        else:
            self._end(job, lambda: self.complete(job, result))
        finally:
            with self._lock:
                self._running.pop(job.id, None)

    def _end(self, job: Job, op: Callable[[], Any]) -> None:
        if job.cancelled.is_set():
            return  # the lease is gone: whatever the handler did is dropped
        try:
            op()
        except LeaseLostError as err:
            log.info("ffd: execution %s: lease lost before its end was recorded: %s", job.id, err)
        except (OSError, FfdError) as err:
            log.error("ffd: execution %s: recording its end failed (the lease will lapse and it is retried): %s", job.id, err)

    def _call(self, job: Job) -> Any:
        fn = self.handlers.get(job.kind) or self.handlers.get("*")
        if fn is None:
            raise Permanent(f"no handler for kind {job.kind!r} on this worker")
        params = list(inspect.signature(fn).parameters.values())
        if len(params) < 2:
            out = fn(job)
        else:
            typ = params[1].annotation
            payload = job.payload
            if dataclasses.is_dataclass(typ) and isinstance(payload, dict):
                payload = typ(**payload)
            out = fn(job, payload)
        if dataclasses.is_dataclass(out) and not isinstance(out, type):
            out = dataclasses.asdict(out)
        return out

    def _every(self, job: Job) -> float:
        # A third of the lease keeps it through two lost renewals; a
        # shorter heartbeat hears of a cancel sooner.
        return max(0.2, min(job.lease_ttl / 3, self.heartbeat or job.lease_ttl))

    def _heartbeat(self) -> None:
        while not self._stop.wait(0.1) or self._running:
            now = time.monotonic()
            with self._lock:
                due = [job for job, at in self._running.values() if at <= now]
            for job in due:
                self._renew(job)

    def _renew(self, job: Job) -> None:
        """Renew job's lease; a lost one cancels the job."""
        try:
            self.renew(job)
        except LeaseLostError as err:
            job.lost = err
            job.cancelled.set()
            with self._lock:
                self._running.pop(job.id, None)
            return
        except (OSError, FfdError) as err:
            log.warning("ffd: renewing the lease of %s failed: %s", job.id, err)
        with self._lock:
            if job.id in self._running:
                self._running[job.id] = (job, time.monotonic() + self._every(job))

    def _watch(self) -> None:
        # The daemon answers a watch as soon as a running job's lease is
        # taken away (a cancel): the renewal it prompts tells the handler
        # at once, not at its next heartbeat.
        while not self._stop.is_set() or self._running:
            with self._lock:
                jobs = {job.id: job for job, _ in self._running.values()}
            if not jobs:
                self._stop.wait(0.05)
                continue
            try:
                out = self._post("watch", {"leases": [{"id": j.id, "epoch": j.epoch} for j in jobs.values()], "wait_ms": 2000}, timeout=32)
            except ProtocolError as err:
                log.warning("ffd: the daemon does not answer watch (%s): cancels are heard at the heartbeat only", err)
                return
            except (OSError, FfdError) as err:
                log.warning("ffd: watch failed: %s", err)
                self._stop.wait(1.0)
                continue
            held = 0
            for id in out["revoked"]:
                with self._lock:
                    running = id in self._running
                if running:
                    held += 1
                    self._renew(jobs[id])
            if out["revoked"] and not held:
                # Jobs that ended on their own since the watch began: a
                # pause, so that short jobs do not keep the watch spinning.
                self._stop.wait(0.1)
