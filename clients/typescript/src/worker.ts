// The worker side: handlers run under ffd's worker protocol (HTTP, JSON;
// docs/worker-protocol.md), served by `ffd run --worker-api`.
//
// A Worker claims executions of its lanes, runs the handler registered
// for each one's kind, renews the lease while it runs (the heartbeat), and
// completes or fails it fenced on the claim's epoch. A lease lost while
// the handler runs (the execution was cancelled, or the lease expired)
// aborts job.signal: pass it to what the handler awaits.

import { hostname } from "node:os";
import { randomUUID } from "node:crypto";

import { ErrorFields, FfdError, LeaseLostError, ProtocolError, fromFields } from "./errors";

/** One claimed execution, as a handler sees it. */
export interface Job<P = unknown> {
  id: string;
  epoch: number;
  attempt: number;
  maxAttempts: number;
  lane: string;
  kind: string;
  namespace: string;
  flowId: string | null;
  step: string;
  payload: P;
  /** The results of the flow member's completed upstreams, by step. */
  upstreams: Record<string, unknown>;
  leaseTtlMs: number;
  /** Aborted once the lease is lost; its reason is the LeaseLostError. */
  signal: AbortSignal;
}

/** A handler: its payload typed P, its result R (encoded as JSON). */
export type Handler<P = any, R = unknown> = (payload: P, job: Job<P>) => R | Promise<R>;

/** Throw it (or one wrapping a cause) to fail the execution without a retry. */
export class Permanent extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "Permanent";
  }
}

export interface WorkerOptions {
  /** The daemon's admin address, e.g. http://127.0.0.1:9464. */
  url: string;
  /** A token of the daemon's --worker-token-file. */
  token: string;
  lanes: string | string[];
  /** Handlers by kind; "*" takes every kind without one of its own. */
  handlers?: Record<string, Handler>;
  /** Handlers running at once, over all lanes. Default 4. */
  concurrency?: number;
  workerId?: string;
  capabilities?: string[];
  /** How long a claim waits for work. Default 5000 ms. */
  claimWaitMs?: number;
  /** How often a running handler's lease is renewed. Default a third of
   * the lease; a cancel reaches a running handler at once through the
   * protocol's watch call, and at its next renewal at the latest. */
  heartbeatMs?: number;
}

interface WireJob {
  id: string;
  epoch: number;
  attempt: number;
  max_attempts: number;
  lane: string;
  kind: string;
  namespace: string;
  flow_id: string | null;
  step: string;
  payload?: unknown;
  payload_base64?: string;
  lease_ttl_ms: number;
  upstreams?: Record<string, unknown>;
}

/** Runs handlers for lanes through the worker protocol. */
export class Worker {
  private readonly url: string;
  private readonly lanes: string[];
  private readonly handlers: Record<string, Handler>;
  private readonly workerId: string;
  private readonly stopping = new AbortController();
  private loops: Promise<void>[] = [];

  constructor(private readonly opts: WorkerOptions) {
    this.url = opts.url.replace(/\/+$/, "") + "/v1/worker/";
    this.lanes = typeof opts.lanes === "string" ? [opts.lanes] : [...opts.lanes];
    if (this.lanes.length === 0) {
      throw new Error("a worker needs at least one lane");
    }
    this.handlers = { ...(opts.handlers ?? {}) };
    this.workerId = opts.workerId ?? `ts:${hostname()}/${randomUUID().slice(0, 8)}`;
  }

  /** Register fn as the handler of kind, typed by its payload and result. */
  handle<P, R>(kind: string, fn: Handler<P, R>): this {
    this.handlers[kind] = fn as Handler;
    return this;
  }

  private async post<T>(op: string, body: unknown, timeoutMs: number): Promise<T> {
    // Aborted by the timeout, or for a claim by stop (AbortSignal.any
    // would do it, from Node 20.3 on).
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error(`${op}: no answer within ${timeoutMs} ms`)), timeoutMs);
    const onStop = () => ac.abort(this.stopping.signal.reason);
    if (op === "claim") {
      this.stopping.signal.addEventListener("abort", onStop);
    }
    let resp: Response;
    let text: string;
    try {
      resp = await fetch(this.url + op, {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${this.opts.token}` },
        body: JSON.stringify(body),
        signal: ac.signal,
      });
      text = await resp.text();
    } finally {
      clearTimeout(timer);
      this.stopping.signal.removeEventListener("abort", onStop);
    }
    let parsed: any;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new ProtocolError({ code: "internal", message: `${op}: HTTP ${resp.status}: ${text.slice(0, 200)}` });
    }
    if (!resp.ok) {
      throw parsed?.error ? fromFields(parsed.error as ErrorFields) : new ProtocolError({ code: "internal", message: `${op}: HTTP ${resp.status}` });
    }
    return parsed as T;
  }

  /** Claim up to one execution of lane, waiting up to waitMs for it. */
  async claim(lane: string, waitMs: number): Promise<Job[]> {
    const out = await this.post<{ executions: WireJob[] }>("claim",
      { lane, worker: this.workerId, capabilities: this.opts.capabilities ?? [], max: 1, wait_ms: waitMs }, waitMs + 30000);
    return out.executions.map((x) => toJob(x, new AbortController().signal));
  }

  renew(job: Job): Promise<{ lease_expires_at: string }> {
    return this.post("renew", { id: job.id, epoch: job.epoch }, 30000);
  }

  complete(job: Job, result: unknown): Promise<{ state: string }> {
    return this.post("complete", { id: job.id, epoch: job.epoch, result: result ?? null }, 30000);
  }

  fail(job: Job, error: string, retryable = true): Promise<{ state: string }> {
    return this.post("fail", { id: job.id, epoch: job.epoch, error: error.slice(0, 16000), retryable }, 30000);
  }

  /** Start claiming: a loop a lane, each claiming as many executions as
   * there are free handler slots (up to 100 a claim). */
  start(): void {
    for (const lane of this.lanes) {
      this.loops.push(this.loop(lane));
    }
    this.loops.push(this.watch());
  }

  /** Stop claiming and wait for the running handlers to end. */
  async stop(): Promise<void> {
    this.stopping.abort();
    this.wakeAll();
    await Promise.all(this.loops);
    await Promise.all(this.inflight);
  }

  private running = 0;
  private readonly held = new Map<string, { job: Job; lost: AbortController }>();
  private readonly inflight = new Set<Promise<void>>();
  private waiting: (() => void)[] = [];

  // A slot came free: wake the loops waiting for one (they look again).
  private release(): void {
    this.running--;
    this.wakeAll();
  }

  private wakeAll(): void {
    const waiting = this.waiting;
    this.waiting = [];
    waiting.forEach((wake) => wake());
  }

  private async loop(lane: string): Promise<void> {
    const concurrency = this.opts.concurrency ?? 4;
    let pause = 100;
    while (!this.stopping.signal.aborted) {
      const free = Math.min(concurrency - this.running, 100);
      if (free <= 0) {
        await new Promise<void>((r) => this.waiting.push(r));
        continue;
      }
      this.running += free; // reserved while the claim is out
      let wire: { executions: WireJob[] } = { executions: [] };
      try {
        wire = await this.post("claim", { lane, worker: this.workerId, capabilities: this.opts.capabilities ?? [], max: free,
          wait_ms: Math.min(this.opts.claimWaitMs ?? 5000, 30000) }, 60000);
        pause = 100;
      } catch (err) {
        if (!this.stopping.signal.aborted) {
          console.warn(`ffd: claim on lane ${lane} failed, retrying in ${pause} ms: ${err}`);
          await new Promise((r) => setTimeout(r, pause));
          pause = Math.min(pause * 2, 5000);
        }
      }
      this.running -= free - wire.executions.length;
      for (const x of wire.executions) {
        const p: Promise<void> = this.run(x).finally(() => {
          this.inflight.delete(p);
          this.release();
        });
        this.inflight.add(p);
      }
    }
  }

  // watch asks the daemon to answer as soon as a running job's lease is
  // taken away (a cancel), and confirms with a renewal, so that the
  // handler hears of it at once, not at its next heartbeat.
  private async watch(): Promise<void> {
    while (!this.stopping.signal.aborted || this.held.size > 0) {
      if (this.held.size === 0) {
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      const held = [...this.held.values()];
      let out: { revoked: string[] };
      try {
        out = await this.post("watch", { leases: held.map((h) => ({ id: h.job.id, epoch: h.job.epoch })), wait_ms: 2000 }, 32000);
      } catch (err) {
        if (err instanceof ProtocolError) {
          console.warn(`ffd: the daemon does not answer watch (${err.message}): cancels are heard at the heartbeat only`);
          return;
        }
        console.warn(`ffd: watch failed: ${err}`);
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      let stillHeld = 0;
      for (const id of out.revoked) {
        const h = this.held.get(id);
        if (h) {
          stillHeld++;
          await this.renew(h.job).catch((err) => {
            if (err instanceof LeaseLostError) {
              h.lost.abort(err);
            }
          });
        }
      }
      if (out.revoked.length > 0 && stillHeld === 0) {
        // Jobs that ended on their own since the watch began: a pause, so
        // that short jobs do not keep the watch spinning.
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  private async run(x: WireJob): Promise<void> {
    const lost = new AbortController();
    const job = toJob(x, lost.signal);
    this.held.set(job.id, { job, lost });
    const every = Math.max(200, Math.min(job.leaseTtlMs / 3, this.opts.heartbeatMs ?? job.leaseTtlMs));
    const beat = setInterval(() => {
      this.renew(job).catch((err) => {
        if (err instanceof LeaseLostError) {
          lost.abort(err);
          clearInterval(beat);
        } else {
          console.warn(`ffd: renewing the lease of ${job.id} failed: ${err}`);
        }
      });
    }, every);
    try {
      const result = await this.call(job);
      await this.end(job, () => this.complete(job, result));
    } catch (err) {
      if (lost.signal.aborted) {
        return;
      }
      const permanent = err instanceof Permanent;
      await this.end(job, () => this.fail(job, err instanceof Error ? `${err.name}: ${err.message}` : String(err), !permanent));
    } finally {
      clearInterval(beat);
      this.held.delete(job.id);
    }
  }

  private async call(job: Job): Promise<unknown> {
    const fn = this.handlers[job.kind] ?? this.handlers["*"];
    if (!fn) {
      throw new Permanent(`no handler for kind ${JSON.stringify(job.kind)} on this worker`);
    }
    return fn(job.payload, job);
  }

  private async end(job: Job, op: () => Promise<unknown>): Promise<void> {
    if (job.signal.aborted) {
      return; // the lease is gone: whatever the handler did is dropped
    }
    try {
      await op();
    } catch (err) {
      if (err instanceof FfdError && err.code === "lease_lost") {
        return;
      }
      console.error(`ffd: execution ${job.id}: recording its end failed (the lease will lapse and it is retried): ${err}`);
    }
  }
}

function toJob(x: WireJob, signal: AbortSignal): Job {
  const payload = x.payload_base64 !== undefined ? Buffer.from(x.payload_base64, "base64") : x.payload ?? null;
  return {
    id: x.id, epoch: x.epoch, attempt: x.attempt, maxAttempts: x.max_attempts, lane: x.lane, kind: x.kind,
    namespace: x.namespace, flowId: x.flow_id, step: x.step, payload, upstreams: x.upstreams ?? {},
    leaseTtlMs: x.lease_ttl_ms, signal,
  };
}
