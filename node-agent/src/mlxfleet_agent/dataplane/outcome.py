"""How one relayed request goes: what it contributes to telemetry and the lease (`Outcome`:
its first token, its usage, how it ended), and what its client's hang-up does (`Gone`: the
backend's connection is dropped, which stops generation; a request mlx-lm cannot stop before its
first token is kept on `Hold` until that token, and its backend declared stuck past the grace).
Filled by the relay (`relay`, `streamed`); read by the app, which records it.
May import: the standard library, slots.lease, dataplane.upstream. Called by: dataplane.app,
dataplane.relay, dataplane.streamed.
"""

from __future__ import annotations

import asyncio
import time

from mlxfleet_agent.dataplane import upstream
from mlxfleet_agent.slots import lease
from mlxfleet_common.wire import openai_proxy as asgi


class Outcome:
    __slots__ = (
        "answered",
        "completion_tokens",
        "error",
        "held",
        "prompt_tokens",
        "started",
        "streaming",
        "ttft_s",
    )

    def __init__(self, held: lease.Lease | None = None) -> None:
        self.error: str | None = None
        self.ttft_s: float | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.started = False  # the response head went out
        self.streaming = False
        self.held = held  # told when the backend answered (its first token): "busy" ends
        self.answered: asyncio.Event | None = None  # set then too, for a hung-up request's wait

    def first_token(self, t0: float) -> None:
        """The backend's first token (or its whole answer) arrived, `t0` after the request."""
        self.ttft_s = time.monotonic() - t0
        if self.held is not None:
            self.held.answered()
        if self.answered is not None:
            self.answered.set()

    def count_usage(self, body: bytes) -> None:
        counted = asgi.usage_of(body)
        if counted is not None:
            self.prompt_tokens, self.completion_tokens = counted


class Gone:
    """Whether the client hung up (read as a plain attribute), and what it does then: the
    backend's connection is dropped (that stops generation); a request on `hold` first waits
    for the point where it does (`Hold`), in a task of its own, cancelled by `stop`."""

    __slots__ = ("hold", "is_set", "outcome", "reply", "task")

    def __init__(
        self,
        reply: upstream.BackendReply | None = None,
        outcome: Outcome | None = None,
        hold: Hold | None = None,
    ) -> None:
        self.is_set = False
        self.reply, self.outcome, self.hold = reply, outcome, hold
        self.task: asyncio.Task[None] | None = None

    def __call__(self) -> None:
        """The client hung up (`hangup.watch_disconnect`)."""
        self.is_set = True
        hold, outcome = self.hold, self.outcome
        if (
            hold is not None
            and outcome is not None
            and outcome.answered is not None
            and outcome.ttft_s is None
        ):
            self.task = asyncio.get_running_loop().create_task(self._held(hold, outcome.answered))
        elif self.reply is not None:
            self.reply.abort()

    async def _held(self, hold: Hold, answered: asyncio.Event) -> None:
        await hold.wait(answered)
        if self.reply is not None:
            self.reply.abort()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


class Hold:
    """A request mlx-lm cannot stop before its first token (`routing.interruptible`): when its
    client leaves, the backend's connection is kept until that token (then closing it stops the
    rest), for at most `grace_s` once the request is the oldest the backend holds; past that,
    the backend is declared stuck and replaced (`Lease.stuck`)."""

    __slots__ = ("grace_s", "held")

    def __init__(self, held: lease.Lease, grace_s: float) -> None:
        self.held = held
        self.grace_s = grace_s

    async def wait(self, answered: asyncio.Event) -> None:
        while True:
            try:
                async with asyncio.timeout(self.grace_s):
                    await answered.wait()
                return
            except TimeoutError:
                if self.held.first_in_line():
                    break
        self.held.stuck(
            f"a request whose client left was still processing its prompt {self.grace_s:g}s "
            "later, and mlx-lm cannot stop a prompt it serves alone (seed, kvBits, images)"
        )
