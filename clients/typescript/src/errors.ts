// ffd's typed errors, the same as the Go API's (docs/sql.md, "Errors").
// The SQL API raises them with SQLSTATE FF001..FF005 and a JSON DETAIL;
// the worker protocol answers them as {"error": {...}}. Both carry the
// same fields, read here into the same classes.

/** The fields every ffd error carries; which are set depends on its code. */
export interface ErrorFields {
  code: string;
  message: string;
  kind?: string;
  field?: string;
  value?: string;
  detail?: string;
  object?: string;
  id?: string;
  reason?: string;
  state?: string;
  epoch?: number;
  current_epoch?: number;
}

/** An error ffd answered, with its stable code and fields. */
export class FfdError extends Error {
  readonly code: string;
  readonly fields: ErrorFields;
  constructor(fields: ErrorFields) {
    super(fields.message);
    this.name = new.target.name;
    this.code = fields.code;
    this.fields = fields;
  }
}

/** Bad input: fields.kind, .field, .value and .detail say which and why. */
export class ValidationError extends FfdError {}
export class NotFoundError extends FfdError {}
export class ConflictError extends FfdError {}
/** The lease is no longer held at this epoch (expired, cancelled, ...). */
export class LeaseLostError extends FfdError {}
export class AlreadyTerminalError extends FfdError {}
/** The worker protocol answered something other than a typed error. */
export class ProtocolError extends FfdError {}

const byCode: Record<string, new (f: ErrorFields) => FfdError> = {
  validation: ValidationError,
  not_found: NotFoundError,
  conflict: ConflictError,
  lease_lost: LeaseLostError,
  already_terminal: AlreadyTerminalError,
};

/** The typed error for a code and its fields. */
export function fromFields(fields: ErrorFields): FfdError {
  const C = byCode[fields.code] ?? FfdError;
  return new C(fields);
}

const sqlStates = new Set(["FF001", "FF002", "FF003", "FF004", "FF005"]);

/** The typed error an SQL API function raised, or err itself. */
export function fromDatabase(err: unknown): unknown {
  const e = err as { code?: string; detail?: string };
  if (!e || typeof e.code !== "string" || !sqlStates.has(e.code) || !e.detail) {
    return err;
  }
  try {
    const typed = fromFields(JSON.parse(e.detail) as ErrorFields);
    (typed as { cause?: unknown }).cause = err;
    return typed;
  } catch {
    return err;
  }
}
