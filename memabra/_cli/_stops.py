"""How the long CLI runs stop (``memabra mempo score``, ``memabra bench``): Ctrl-C (SIGINT) and a
job scheduler's SIGTERM (Slurm, Kubernetes, systemd, ``docker stop``) both end them with what was
stored said, and the conventional exit code, 128 + the signal's number (130, 143).

A signal that arrives while a chunk's labels are being stored waits for that transaction: the
count the command reports is then exactly what the log holds, and no chunk is cut off in the
middle of its commit (where a rollback could not be told from a commit that went through).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from memabra._cli._common import fail

__all__ = ["StopSignals", "Stopped", "exit_code", "nothing_stored_if_stopped", "stopped_by"]

# what the command's message opens with: Ctrl-C's has said "interrupted" since before SIGTERM was caught
_SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM"}


class Stopped(KeyboardInterrupt):
    """The run was stopped by ``signum``: a KeyboardInterrupt, so every path Ctrl-C takes it takes."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_code(stop: KeyboardInterrupt) -> int:
    """128 + the signal's number: what a shell reports for a process a signal ended."""
    return 128 + (stop.signum if isinstance(stop, Stopped) else signal.SIGINT)


def stopped_by(stop: KeyboardInterrupt) -> str:
    """How the stop is said: "interrupted" (Ctrl-C) or "stopped by SIGTERM"."""
    signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
    return _SAID.get(signal.Signals(signum), f"stopped by signal {signum}")


@contextmanager
def nothing_stored_if_stopped() -> Iterator[None]:
    """Around a block whose loading and scoring catch their own stops (saying what they stored): a
    stop anywhere else in it (counting a large log's decisions takes seconds) stored nothing, and
    exits saying so with its code, not as a bare KeyboardInterrupt reaching click ("Aborted!", exit 1)."""
    try:
        yield
    except KeyboardInterrupt as stop:
        fail(f"{stopped_by(stop)} before scoring began: no decision scored or stored", code=exit_code(stop))


class StopSignals:
    """SIGINT and SIGTERM handlers raising :class:`Stopped`, deferred inside :meth:`storing`."""

    def __init__(self) -> None:
        self._storing = False
        self._pending: int | None = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._storing:
            self._pending = signum  # raised once the chunk's transaction has ended
            return
        raise Stopped(signum)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The handlers, for the block's duration (handlers can be set in the main thread only: a
        command run from another thread keeps the process's own)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, self._handle)}
        # a job started in the background by a shell ignores SIGINT: it keeps ignoring it
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @contextmanager
    def storing(self) -> Iterator[None]:
        """A store that a stop waits for; the stop is raised after it, once it succeeded."""
        self._storing = True
        try:
            yield
        finally:
            self._storing = False
        if self._pending is not None:
            signum, self._pending = self._pending, None
            raise Stopped(signum)
