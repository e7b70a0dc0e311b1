"""The producer side: ffd's SQL API through a psycopg 3 connection.

Every call runs in the connection's current transaction, so an execution
or a flow is created exactly when the caller's own writes commit::

    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO orders ...")
        ffd.Client(conn).create("billing", kind="charge", payload={"order": 7})
    # committed together on leaving the block
"""

import json
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional

from .errors import from_database


class Client:
    """ffd's SQL API over one psycopg connection (or a cursor's)."""

    def __init__(self, conn: Any):
        self.conn = conn

    def _call(self, fn: str, *args: Any) -> Any:
        marks = ", ".join(["%s"] * len(args))
        try:
            row = self.conn.execute(f"SELECT {fn}({marks})::text", args).fetchone()
        except Exception as err:  # psycopg.Error: re-raised typed when it is one of ffd's
            typed = from_database(err)
            if typed is err:
                raise
            raise typed from err
        return json.loads(row[0]) if row and row[0] is not None else None

    @staticmethod
    def _json(v: Any) -> str:
        return json.dumps(v, separators=(",", ":"))

    def create(self, lane: str, *, kind: str = "", payload: Any = None, **options: Any) -> Dict[str, Any]:
        """Create one execution; options are the SQL API's other fields
        (namespace, priority, capabilities, max_attempts, lease_ttl,
        attempt_timeout, deadline, delay, idempotency_key, tags). Durations
        are milliseconds or an interval string ("30s"). Answers the
        execution, with existed=True when its idempotency key was used."""
        return self._call("ffd_create", self._json(self._given(lane=lane, kind=kind, payload=payload, **options)))

    def create_many(self, executions: Iterable[Mapping[str, Any]]) -> List[str]:
        """Create a batch (at most 10,000) in one statement; answers the ids in order."""
        return self._call("ffd_create_many", self._json(list(executions)))

    def submit_flow(self, nodes: List[Mapping[str, Any]], edges: Iterable[Mapping[str, str]] = (), **flow: Any) -> Dict[str, Any]:
        """Submit a flow: nodes are {"ref", "lane", "policy", ...create
        fields}, edges {"from", "to"}; flow takes id, namespace, kind and
        tags. Answers {"flow_id", "executions": {ref: id}}."""
        return self._call("ffd_submit_flow", self._json({**flow, "nodes": list(nodes), "edges": list(edges)}))

    @staticmethod
    def _given(**fields: Any) -> Dict[str, Any]:
        # The fields given: an empty or None one is left to its default.
        return {k: v for k, v in fields.items() if v is not None and v != ""}

    def signal(self, name: str, *, flow_id: Optional[str] = None, execution_id: Optional[str] = None, payload: Any = None) -> Dict[str, Any]:
        """Signal a flow or an execution (exactly one)."""
        return self._call("ffd_signal", self._json(self._given(name=name, flow_id=flow_id, execution_id=execution_id, payload=payload)))

    def publish(self, name: str, *, key: str = "", payload: Any = None, namespace: str = "") -> Dict[str, Any]:
        """Publish an event; a key published before under name is that event (existed)."""
        return self._call("ffd_publish", self._json(self._given(name=name, key=key, namespace=namespace, payload=payload)))

    def cancel(self, execution_id: str, reason: str = "", by: str = "") -> Dict[str, Any]:
        return self._call("ffd_cancel", execution_id, reason, by)

    def cancel_flow(self, flow_id: str, policy: str = "cancel_all", reason: str = "") -> Dict[str, Any]:
        return self._call("ffd_cancel_flow", flow_id, policy, reason)

    def execution(self, execution_id: str) -> Dict[str, Any]:
        return self._call("ffd_execution", execution_id)

    def flow(self, flow_id: str) -> Dict[str, Any]:
        return self._call("ffd_flow", flow_id)

    def wait_flow(self, flow_id: str, timeout: float = 60.0, poll: float = 0.1) -> Dict[str, Any]:
        """Poll a flow until it leaves open; raises TimeoutError naming the
        budget. Use a connection in autocommit mode, or each poll reads
        the same snapshot."""
        return self._wait(lambda: self.flow(flow_id), lambda f: f["state"] != "open", f"flow {flow_id}", timeout, poll)

    def wait_execution(self, execution_id: str, timeout: float = 60.0, poll: float = 0.1) -> Dict[str, Any]:
        """Poll an execution until it is terminal; its result is x["result"]."""
        live = ("blocked", "pending", "running")
        return self._wait(lambda: self.execution(execution_id), lambda x: x["state"] not in live, f"execution {execution_id}", timeout, poll)

    @staticmethod
    def _wait(read, done, what: str, timeout: float, poll: float) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            v = read()
            if done(v):
                return v
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} still {v['state']} after {timeout}s (the wait's budget)")
            time.sleep(poll)
