// Tests of the TypeScript client against a real Postgres and ffd daemon.
// The Go test clients/clients_test.go starts both and runs these with
// FFD_CLIENT_DATABASE_URL, FFD_CLIENT_API_URL and FFD_CLIENT_TOKEN set.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Pool } from "pg";

import { Client, LeaseLostError, NotFoundError, Permanent, ValidationError, Worker, fromDatabase } from "../src";

const db = process.env.FFD_CLIENT_DATABASE_URL!;
const url = process.env.FFD_CLIENT_API_URL!;
const token = process.env.FFD_CLIENT_TOKEN!;
const budget = 120000; // ms any wait below may take on a machine whose every core is busy

let pool: Pool;
let client: Client;
before(() => {
  pool = new Pool({ connectionString: db, max: 4 });
  client = new Client(pool);
});
after(() => pool.end());

const lane = (name: string) => `ts.${name}.${randomUUID().slice(0, 8)}`;

async function withWorker<T>(w: Worker, fn: () => Promise<T>): Promise<T> {
  w.start();
  try {
    return await fn();
  } finally {
    await w.stop();
  }
}

test("create commits with the caller's transaction", async () => {
  const l = lane("tx");
  const conn = await pool.connect();
  try {
    await conn.query("BEGIN");
    const x = await new Client(conn).create({ lane: l, kind: "charge", payload: { order: 7 } });
    await conn.query("ROLLBACK");
    await assert.rejects(client.execution(x.id), NotFoundError);
    await conn.query("BEGIN");
    const y = await new Client(conn).create({ lane: l, kind: "charge", payload: { order: 7 } });
    await conn.query("COMMIT");
    const got = await client.execution(y.id);
    assert.deepEqual([got.lane, got.kind, got.payload, got.state], [l, "charge", { order: 7 }, "pending"]);
  } finally {
    conn.release();
  }
});

test("bad input is typed", async () => {
  await assert.rejects(client.create({ lane: "no spaces" }), (err: unknown) => {
    assert.ok(err instanceof ValidationError);
    assert.deepEqual([err.code, err.fields.kind, err.fields.field], ["validation", "invalid_value", "lane"]);
    return true;
  });
  await assert.rejects(pool.query(`SELECT ffd_create('{"lane": ')`).catch((e) => { throw fromDatabase(e); }), ValidationError);
  await assert.rejects(client.submitFlow({ nodes: [{ ref: "a", lane: "l" }], edges: [{ from: "a", to: "a" }] }), ValidationError);
  await assert.rejects(client.cancel(`{fp:2}:${randomUUID()}`), NotFoundError);
});

test("a stale epoch is a lost lease", async () => {
  const l = lane("stale");
  await client.create({ lane: l });
  const w = new Worker({ url, token, lanes: l });
  const [job] = await w.claim(l, 10000);
  assert.ok(job);
  await assert.rejects(w.complete({ ...job, epoch: job.epoch + 1 }, 1), LeaseLostError);
  assert.equal((await w.complete(job, { ok: true })).state, "completed");
});

interface Order { order: number; amount: number }
interface Receipt { order: number; charged: number }

test("a flow runs with a retry and typed handlers", async () => {
  const l = lane("flow");
  const attempts: number[] = [];
  const w = new Worker({ url, token, lanes: l, claimWaitMs: 1000 })
    .handle<unknown, Order>("first", (_p, job) => {
      attempts.push(job.attempt);
      if (job.attempt === 1) {
        throw new Error("flaky the first time");
      }
      return { order: 42, amount: 9.5 };
    })
    .handle<Order, Receipt>("charge", (_p, job) => {
      const up = job.upstreams.first as Order;
      return { order: up.order, charged: up.amount * 2 };
    });
  const flow = await withWorker(w, async () => {
    const sub = await client.submitFlow({ kind: "ts-test", nodes: [{ ref: "first", lane: l, kind: "first", max_attempts: 3 },
      { ref: "second", lane: l, kind: "charge" }], edges: [{ from: "first", to: "second" }] });
    return client.waitFlow(sub.flow_id, budget);
  });
  assert.equal(flow.state, "completed");
  assert.deepEqual(flow.members.second.result, { order: 42, charged: 19 });
  assert.deepEqual(attempts, [1, 2]);
});

test("a permanent failure is not retried", async () => {
  const l = lane("perm");
  const w = new Worker({ url, token, lanes: l, claimWaitMs: 1000, handlers: { "*": () => { throw new Permanent("card declined"); } } });
  const got = await withWorker(w, async () => {
    const x = await client.create({ lane: l, max_attempts: 5 });
    return client.waitExecution(x.id, budget);
  });
  assert.deepEqual([got.state, got.attempt, got.last_error], ["failed", 1, "Permanent: card declined"]);
});

test("a cancel aborts a running handler's signal", async () => {
  const l = lane("cancel");
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  let aborted!: (reason: unknown) => void;
  const stopped = new Promise<unknown>((r) => (aborted = r));
  const w = new Worker({ url, token, lanes: l, claimWaitMs: 1000, handlers: {
    "*": (_p, job) => new Promise((_, reject) => {
      started();
      job.signal.addEventListener("abort", () => { aborted(job.signal.reason); reject(job.signal.reason); });
    }),
  } });
  await withWorker(w, async () => {
    // A heartbeat every 20 minutes: within the budget, only the
    // protocol's watch can tell the handler.
    const x = await client.create({ lane: l, lease_ttl: "1 hour" });
    await running;
    assert.equal((await client.cancel(x.id, "changed my mind")).state, "cancelled");
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise((_, rej) => (timer = setTimeout(() => rej(new Error(`no abort within ${budget} ms (the test's budget)`)), budget)));
    try {
      assert.ok((await Promise.race([stopped, late])) instanceof LeaseLostError);
    } finally {
      clearTimeout(timer);
    }
  });
});
