"""Retry budget: retries may add at most `ratio` of the requests, plus `min_per_s` per second, so
a failing fleet cannot turn every request into a storm of attempts (the Finagle/Linkerd rule).

May import: the standard library. Called by: the proxy.
"""

from __future__ import annotations


class RetryBudget:
    def __init__(self, *, ratio: float = 0.2, min_per_s: float = 10.0, now: float = 0.0) -> None:
        self.ratio = ratio
        self.min_per_s = min_per_s
        self.cap = max(min_per_s, 1.0) * 10
        self.balance = self.cap
        self.last = now

    def _refill(self, now: float) -> None:
        if now > self.last:
            self.balance = min(self.cap, self.balance + (now - self.last) * self.min_per_s)
            self.last = now

    def deposit(self, *, now: float) -> None:
        """One request arrived: it earns `ratio` of a retry."""
        self._refill(now)
        self.balance = min(self.cap, self.balance + self.ratio)

    def withdraw(self, *, now: float) -> bool:
        """Spend one retry if the budget has one."""
        self._refill(now)
        if self.balance >= 1.0 - 1e-9:  # sums of ratios are not exact in binary
            self.balance -= 1.0
            return True
        return False
