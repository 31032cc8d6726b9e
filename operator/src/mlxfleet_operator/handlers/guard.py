"""The one guard every resource handler runs in: one run at a time per object, adapter errors
mapped to kopf retries, and the reconcile metrics.

    async with guard.guarded(resources.SWAP_PLAN, body, memo) as run:
        ...  # parse -> core -> adapters -> status, with run.rt

- A run holds the object's lock (a timer and an event handler may overlap).
- `last=True`: the run of a delete handler. When it ends, everything this process kept about
  the object (`adapters.objects`: its record, lock included) is forgotten, ended well or not
  (a retried run starts a record again and forgets it again): nothing outlives its object.
- `kube.KubeError` and `agent.AgentError` (the Kubernetes API or an agent failed) become
  `kopf.TemporaryError(delay=--poll-seconds)`: kopf retries, nothing is lost. Handlers catch the
  agent errors they have a decision for (a refused slot is a status, not a retry); the rest
  lands here. Anything else propagates to kopf (logged, retried with its backoff).
- `mlxfleet_operator_reconciles_total{kind,result}` counts every run: `ok`, `invalid` (the body
  is beyond what the operator's model accepts; the handler said so in status: `run.invalid()`),
  `retry` (the handler asked kopf to retry, e.g. waiting for a first poll), `error`,
  `skipped` (another run had just decided on the same inputs: `run.skipped()`);
  `mlxfleet_operator_reconcile_seconds{kind}` times every run but the skipped ones.
- `by_timer(logger)` wraps an event or create/update/resume handler of a kind that also has a
  timer: it never fails to kopf, the timer's next tick is its retry. kopf persists a failed
  create/update handler's progress on the object itself (an annotation written at every try,
  and a `touch-dummy` annotation written to wake the object up again), where a timer's retry
  lives in memory only: a deployment that cannot finish now must not write its object.

May import: kopf, adapters, api. Called by: every handler module (the only module besides
`indexes` that handler modules share).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import kopf

from mlxfleet_operator.adapters import agent, kube, metrics, runtime
from mlxfleet_operator.api import resources


@dataclass
class Run:
    """One guarded handler run: the operator's runtime, and how the run ended (for metrics)."""

    rt: runtime.Runtime
    result: str = "ok"

    def invalid(self) -> None:
        """The object's body was refused (and the handler wrote why into its status)."""
        self.result = "invalid"

    def skipped(self) -> None:
        """Nothing to do: another run decided on these very inputs (not timed)."""
        self.result = "skipped"


@contextlib.asynccontextmanager
async def by_timer(logger: kopf.Logger) -> AsyncIterator[None]:
    """Around a create/update/resume handler whose kind has a timer (see the module)."""
    try:
        yield
    except kopf.TemporaryError as exc:
        logger.warning(f"Not finished now, the timer tries again: {exc}")
    except Exception:  # a bug: logged with its traceback; the timer tries again
        logger.exception("Failed, the timer tries again")


@contextlib.asynccontextmanager
async def guarded(
    kind: resources.Resource, body: kopf.Body, memo: kopf.Memo, *, last: bool = False
) -> AsyncIterator[Run]:
    rt = runtime.of(memo)
    run = Run(rt)
    started = time.monotonic()
    uid = str(body.metadata.uid)
    try:
        async with rt.lock(uid):
            yield run
    except (kube.KubeError, agent.AgentError) as exc:
        run.result = "error"
        raise kopf.TemporaryError(str(exc), delay=rt.config.poll_seconds) from exc
    except kopf.TemporaryError:
        run.result = "retry"
        raise
    except Exception:
        run.result = "error"
        raise
    finally:
        if last:
            rt.objects.forget(uid)
        metrics.RECONCILES.labels(kind.kind, run.result).inc()
        if run.result != "skipped":
            metrics.RECONCILE_SECONDS.labels(kind.kind).observe(time.monotonic() - started)
