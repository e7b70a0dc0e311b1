"""Tests of the Python client against a real Postgres and ffd daemon.

The Go test clients/clients_test.go starts both and runs this file with
FFD_CLIENT_DATABASE_URL, FFD_CLIENT_API_URL and FFD_CLIENT_TOKEN set.
"""

import dataclasses
import os
import threading
import unittest
import uuid

import psycopg

import ffd

DB = os.environ["FFD_CLIENT_DATABASE_URL"]
API = os.environ["FFD_CLIENT_API_URL"]
TOKEN = os.environ["FFD_CLIENT_TOKEN"]
BUDGET = 120.0  # seconds any wait below may take on a machine whose every core is busy


def lane(name):
    return f"py.{name}.{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass
class Order:
    order: int
    amount: float


@dataclasses.dataclass
class Receipt:
    order: int
    charged: float


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.conn = psycopg.connect(DB, autocommit=True)
        self.client = ffd.Client(self.conn)
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.stop()
        self.conn.close()

    def worker(self, lanes, handlers, **kw):
        w = ffd.Worker(API, TOKEN, lanes, handlers, claim_wait=1.0, **kw)
        w.start()
        self.workers.append(w)
        return w

    def test_create_commits_with_the_callers_transaction(self):
        l = lane("tx")
        with psycopg.connect(DB) as conn:
            x = ffd.Client(conn).create(l, kind="charge", payload={"order": 7}, priority=2)
            conn.rollback()
        with self.assertRaises(ffd.NotFoundError) as caught:
            self.client.execution(x["id"])
        self.assertEqual(caught.exception.object, "execution")
        with psycopg.connect(DB) as conn:
            x = ffd.Client(conn).create(l, kind="charge", payload={"order": 7}, priority=2)
        got = self.client.execution(x["id"])
        self.assertEqual((got["lane"], got["kind"], got["payload"], got["state"]), (l, "charge", {"order": 7}, "pending"))

    def test_idempotency_key(self):
        l = lane("key")
        first = self.client.create(l, idempotency_key="order-1")
        again = self.client.create(l, idempotency_key="order-1")
        self.assertFalse(first["existed"])
        self.assertTrue(again["existed"])
        self.assertEqual(first["id"], again["id"])

    def test_bad_input_is_typed(self):
        with self.assertRaises(ffd.ValidationError) as caught:
            self.client.create("no spaces")
        e = caught.exception
        self.assertEqual((e.code, e.kind, e.field), ("validation", "invalid_value", "lane"))
        with self.assertRaises(ffd.ValidationError) as caught:
            self.client._call("ffd_create", '{"lane": ')
        self.assertEqual(caught.exception.field, "params")
        with self.assertRaises(ffd.ValidationError) as caught:
            self.client.submit_flow([{"ref": "a", "lane": "l"}, {"ref": "b", "lane": "l"}], [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}])
        self.assertEqual(caught.exception.kind, "cycle")
        with self.assertRaises(ffd.NotFoundError):
            self.client.cancel("{fp:1}:" + str(uuid.uuid4()))
        with self.assertRaises(ffd.ValidationError) as caught:
            self.client.cancel("nope")
        self.assertEqual(caught.exception.kind, "malformed_id")

    def test_stale_epoch_is_lease_lost(self):
        l = lane("stale")
        self.client.create(l)
        w = ffd.Worker(API, TOKEN, l)
        self.addCleanup(w.stop)
        jobs = w.claim(l, 10)
        self.assertEqual(len(jobs), 1)
        job = jobs[0]
        job.epoch += 1
        with self.assertRaises(ffd.LeaseLostError):
            w.complete(job, 1)
        job.epoch -= 1
        self.assertEqual(w.complete(job, {"ok": True})["state"], "completed")
        with self.assertRaises(ffd.ValidationError):
            w.renew(dataclasses.replace(job, id="bad"))

    def test_flow_runs_with_a_retry_and_typed_handlers(self):
        l = lane("flow")
        attempts = []

        def first(job):
            attempts.append(job.attempt)
            if job.attempt == 1:
                raise RuntimeError("flaky the first time")
            return {"order": 42, "amount": 9.5}

        def charge(job, order: Order) -> Receipt:
            up = job.upstreams["first"]
            return Receipt(order=up["order"], charged=up["amount"] * 2)

        self.worker(l, {"first": first, "charge": charge})
        sub = self.client.submit_flow([{"ref": "first", "lane": l, "kind": "first", "max_attempts": 3},
                                       {"ref": "second", "lane": l, "kind": "charge", "payload": {"order": 1, "amount": 1}}],
                                      [{"from": "first", "to": "second"}], kind="py-test")
        flow = self.client.wait_flow(sub["flow_id"], timeout=BUDGET)
        self.assertEqual(flow["state"], "completed", flow)
        self.assertEqual(flow["members"]["second"]["result"], {"order": 42, "charged": 19.0})
        self.assertEqual(attempts, [1, 2])

    def test_permanent_failure_is_not_retried(self):
        l = lane("perm")

        def refuse(job):
            raise ffd.Permanent("card declined")

        self.worker(l, {"*": refuse})
        x = self.client.create(l, max_attempts=5)
        got = self.client.wait_execution(x["id"], timeout=BUDGET)
        self.assertEqual((got["state"], got["attempt"], got["last_error"]), ("failed", 1, "card declined"))

    def test_cancel_reaches_a_running_handler(self):
        l = lane("cancel")
        started, stopped = threading.Event(), threading.Event()

        def long(job):
            started.set()
            try:
                while True:
                    job.sleep(0.05)
            except ffd.Cancelled:
                stopped.set()
                raise

        self.worker(l, {"*": long})
        # A heartbeat every 20 minutes: within the budget, only the
        # protocol's watch can tell the handler.
        x = self.client.create(l, lease_ttl="1 hour")
        self.assertTrue(started.wait(BUDGET), f"the handler did not start within {BUDGET}s")
        self.assertEqual(self.client.cancel(x["id"], reason="changed my mind")["state"], "cancelled")
        self.assertTrue(stopped.wait(BUDGET), f"the cancel did not reach the handler within {BUDGET}s")
        self.assertEqual(self.client.execution(x["id"])["state"], "cancelled")


if __name__ == "__main__":
    unittest.main()
