"""The Python step of the mixed flow (docs/languages.md, examples/mixed).

It scores the Go step's quote, failing its first attempt on purpose so
that the retry is seen; the kind "hold" runs until it is cancelled, and
says so, to show a cancel reaching a running Python handler.

Environment: FFD_API_URL (the daemon's admin address, serving the worker
protocol) and FFD_WORKER_TOKEN.
"""

import os
import signal
import threading

import ffd

worker = ffd.Worker(os.environ["FFD_API_URL"], os.environ["FFD_WORKER_TOKEN"], "mixed.py")


@worker.handler("score")
def score(job: ffd.Job):
    if job.attempt == 1:
        raise RuntimeError("the risk model was still loading (the first attempt fails on purpose)")
    quote = job.upstreams["quote"]
    return {**quote, "risk": 0.1, "by": quote["by"] + ["python"]}


@worker.handler("hold")
def hold(job: ffd.Job):
    print("started", job.id, flush=True)
    try:
        while True:
            job.sleep(0.1)
    except ffd.Cancelled:
        print("cancelled", job.id, flush=True)
        raise


if __name__ == "__main__":
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    worker.start()
    print("ready", flush=True)
    stop.wait()
    worker.stop()
