// The producer side: ffd's SQL API through node-postgres. Every call runs
// on the connection it is given, inside whatever transaction is open
// there, so an execution or a flow is created exactly when the caller's
// own writes commit:
//
//   const db = await pool.connect();
//   await db.query("BEGIN");
//   await db.query("INSERT INTO orders ...");
//   await new Client(db).create("billing", { kind: "charge", payload: { order: 7 } });
//   await db.query("COMMIT");

import { fromDatabase } from "./errors";

/** What the client needs of a connection: pg.Client, pg.PoolClient or pg.Pool. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** The fields of one execution to create (docs/sql.md). Durations are
 * milliseconds or an interval string ("30s"). */
export interface CreateParams {
  lane: string;
  kind?: string;
  payload?: unknown;
  namespace?: string;
  priority?: number;
  capabilities?: string[];
  max_attempts?: number;
  lease_ttl?: number | string;
  attempt_timeout?: number | string;
  deadline?: number | string;
  delay?: number | string;
  idempotency_key?: string;
  tags?: Record<string, unknown>;
}

export interface Policy {
  kind?: "all_of" | "any_of" | "quorum";
  k?: number;
  on_satisfied?: "cancel_remaining" | "let_run";
}

export interface FlowNode extends CreateParams {
  ref: string;
  policy?: Policy;
}

export interface FlowEdge {
  from: string;
  to: string;
}

export interface SubmitFlowParams {
  id?: string;
  namespace?: string;
  kind?: string;
  tags?: Record<string, unknown>;
  nodes: FlowNode[];
  edges?: FlowEdge[];
}

export type State = "blocked" | "pending" | "running" | "completed" | "failed" | "cancelled" | "skipped" | "expired";

export interface Execution {
  id: string;
  flow_id: string | null;
  namespace: string;
  lane: string;
  kind: string;
  state: State;
  step: string | null;
  attempt: number;
  max_attempts: number;
  run_at: string;
  created_at: string;
  terminal_at: string | null;
  payload: unknown;
  result: unknown;
  last_error: string | null;
  cancellation_reason: string | null;
  existed?: boolean;
}

export interface Flow {
  id: string;
  namespace: string;
  kind: string;
  state: "open" | "completed" | "failed" | "cancelled";
  created_at: string;
  terminal_at: string | null;
  cancel_reason: string | null;
  node_count: number;
  edge_count: number;
  members: Record<string, Execution>;
}

const live = new Set(["blocked", "pending", "running"]);

/** ffd's SQL API over one connection. */
export class Client {
  constructor(readonly db: Queryable) {}

  private async call<T>(fn: string, ...args: unknown[]): Promise<T> {
    const marks = args.map((_, i) => `$${i + 1}`).join(", ");
    try {
      const { rows } = await this.db.query(`SELECT ${fn}(${marks})::text AS v`, args);
      return JSON.parse(rows[0].v) as T;
    } catch (err) {
      throw fromDatabase(err);
    }
  }

  /** Create one execution; existed is true when its idempotency key was used. */
  create(p: CreateParams): Promise<Execution> {
    return this.call("ffd_create", JSON.stringify(p));
  }

  /** Create a batch (at most 10,000) in one statement; the ids in order. */
  createMany(ps: CreateParams[]): Promise<string[]> {
    return this.call("ffd_create_many", JSON.stringify(ps));
  }

  /** Submit a flow; the ids of its executions by ref. */
  submitFlow(p: SubmitFlowParams): Promise<{ flow_id: string; executions: Record<string, string> }> {
    return this.call("ffd_submit_flow", JSON.stringify(p));
  }

  signal(p: { name: string; flow_id?: string; execution_id?: string; payload?: unknown }): Promise<{ signal_id: string; woke: string | null }> {
    return this.call("ffd_signal", JSON.stringify(p));
  }

  publish(p: { name: string; key?: string; namespace?: string; payload?: unknown }): Promise<{ event_id: string; existed: boolean }> {
    return this.call("ffd_publish", JSON.stringify(p));
  }

  cancel(executionId: string, reason = "", by = ""): Promise<{ state: State; repeated: boolean }> {
    return this.call("ffd_cancel", executionId, reason, by);
  }

  cancelFlow(flowId: string, policy: "cancel_all" | "cancel_pending" | "flow_only" = "cancel_all", reason = ""): Promise<{ members: string[]; repeated: boolean }> {
    return this.call("ffd_cancel_flow", flowId, policy, reason);
  }

  execution(id: string): Promise<Execution> {
    return this.call("ffd_execution", id);
  }

  flow(id: string): Promise<Flow> {
    return this.call("ffd_flow", id);
  }

  /** Poll a flow until it is no longer open; rejects naming the budget. */
  waitFlow(id: string, timeoutMs = 60000, pollMs = 100): Promise<Flow> {
    return wait(() => this.flow(id), (f) => f.state !== "open", `flow ${id}`, timeoutMs, pollMs);
  }

  /** Poll an execution until it is terminal; its result is .result. */
  waitExecution(id: string, timeoutMs = 60000, pollMs = 100): Promise<Execution> {
    return wait(() => this.execution(id), (x) => !live.has(x.state), `execution ${id}`, timeoutMs, pollMs);
  }
}

async function wait<T extends { state: string }>(read: () => Promise<T>, done: (v: T) => boolean, what: string, timeoutMs: number, pollMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (done(v)) {
      return v;
    }
    if (Date.now() >= deadline) {
      throw new Error(`${what} still ${v.state} after ${timeoutMs} ms (the wait's budget)`);
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
}
