"""The ``MEMABRA_*`` environment variables memabra reads, and a warning naming the closest one for a
``MEMABRA_*`` variable it does not know.

An unknown name is warned about, not refused: a deployment may carry variables of its own under
the prefix, and refusing them would stop a process that works. A typo (``MEMABRA_REWARD_WIEGHTS``)
would otherwise leave the setting at its default without a word.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
from collections.abc import Mapping

__all__ = [
    "KNOWN_VARIABLES",
    "PREFIX",
    "empty_variable_error",
    "unknown_variables",
    "unreported_unknown_variables",
    "warn_unknown_variables",
]

logger = logging.getLogger("memabra")

PREFIX = "MEMABRA_"

# Every variable read anywhere in memabra (and its test suite), so that none of them is warned about.
KNOWN_VARIABLES: frozenset[str] = frozenset(
    {
        "MEMABRA_CONFIG",
        "MEMABRA_DATABASE_URL",
        "MEMABRA_REWARD_WEIGHTS",
        "MEMABRA_FEEDBACK_WINDOW_SECONDS",
        "MEMABRA_ADMIN_TOKEN",
        "MEMABRA_ADMIN_PASSWORD",
        "MEMABRA_ADMIN_REVIEWER_TOKEN",
        "MEMABRA_ADMIN_REVIEWER_PASSWORD",
        "MEMABRA_TEST_DATABASE_URL",
        "MEMABRA_TEST_ARTIFACTS",
    }
)

# Names already warned about in this process: a long-lived agent loads its reward configuration
# more than once, and one warning per typo is enough.
_reported: set[str] = set()
_reported_lock = threading.Lock()


def _message(name: str) -> str:
    # compared without the shared prefix, which would make every name look close to every other
    suffixes = {known[len(PREFIX) :]: known for known in KNOWN_VARIABLES}
    close = difflib.get_close_matches(name.upper()[len(PREFIX) :], sorted(suffixes), n=1, cutoff=0.6)
    hint = (
        f"did you mean {suffixes[close[0]]}?"
        if close
        else "the variables memabra reads are listed in docs/configuration.md"
    )
    return f"${name} is not a memabra setting and is ignored; {hint}"


def unknown_variables(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """One message per ``MEMABRA_*`` variable in ``environ`` (default: the process's) that memabra
    does not read, naming the closest known one; sorted by name."""
    env = os.environ if environ is None else environ
    return tuple(
        _message(name) for name in sorted(env) if name.upper().startswith(PREFIX) and name not in KNOWN_VARIABLES
    )


def unreported_unknown_variables(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """:func:`unknown_variables` less those this process already reported (which it now marks reported)."""
    env = os.environ if environ is None else environ
    fresh: list[str] = []
    with _reported_lock:
        for name in sorted(env):
            if name.upper().startswith(PREFIX) and name not in KNOWN_VARIABLES and name not in _reported:
                _reported.add(name)
                fresh.append(_message(name))
    return tuple(fresh)


def warn_unknown_variables(environ: Mapping[str, str] | None = None) -> None:
    """Log a warning for each unknown ``MEMABRA_*`` variable, once per process and name."""
    for message in unreported_unknown_variables(environ):
        logger.warning(message)


def empty_variable_error(name: str, meaning: str) -> str:
    """The message for a variable that is set to nothing: an unfilled secret or template value,
    which must not quietly mean "use the default"."""
    return f"${name} is set but empty; set it to {meaning}, or unset it"
