// The TypeScript step of the mixed flow (docs/languages.md,
// examples/mixed): it notifies the customer of the Python step's scored
// quote, failing its first attempt on purpose so that the retry is seen.
//
// Environment: FFD_API_URL (the daemon's admin address, serving the
// worker protocol) and FFD_WORKER_TOKEN.

import { Worker } from "../src";

interface Scored {
  order: number;
  amount: number;
  risk: number;
  by: string[];
}

const worker = new Worker({ url: process.env.FFD_API_URL!, token: process.env.FFD_WORKER_TOKEN!, lanes: "mixed.ts", claimWaitMs: 1000 })
  .handle<unknown, Scored>("notify", (_payload, job) => {
    if (job.attempt === 1) {
      throw new Error("the mail relay was busy (the first attempt fails on purpose)");
    }
    const scored = job.upstreams.score as Scored;
    return { ...scored, by: [...scored.by, "typescript"] };
  });

worker.start();
console.log("ready");
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  process.on(sig, () => {
    worker.stop().then(() => process.exit(0));
  });
}
