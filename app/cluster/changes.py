"""A change counter that coroutines can wait on: the watch-fed caches bump it, waiters wake up.

``ClusterCache.changes`` counts changes of nodes and pods (filter's lag detection waits on it);
``DraState.claim_changes`` those of ResourceClaims (what /bind waits on while a device's binding
conditions are pending).
"""

from __future__ import annotations

import asyncio

__all__ = ["ChangeSignal"]


class ChangeSignal:
    def __init__(self) -> None:
        self.version = 0
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        self.version += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def changed_after(self, version: int, timeout: float) -> bool:
        """Wait until a change after ``version`` (True), or ``timeout`` seconds without one (False)."""
        if self.version != version:
            return True
        if timeout <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return self.version != version
        finally:
            if not waiter.done():
                waiter.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return True
