// TypeScript client of ffd (docs/typescript.md): producers call ffd's SQL
// API through node-postgres inside their own transactions (Client);
// handlers run in a Worker that speaks ffd's worker protocol over HTTP.

export * from "./errors";
export * from "./client";
export * from "./worker";
