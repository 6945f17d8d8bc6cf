"""The ``MEMABRA_*`` environment variables memabra reads, and a warning naming the closest one for a
``MEMABRA_*`` variable it does not know.

An unknown name is warned about, not refused: a deployment may carry variables of its own under
the prefix, and refusing them would stop a process that works. A typo (``MEMABRA_REWARD_WIEGHTS``)
would otherwise leave the setting at its default without a word.

Each secret (:data:`SECRET_VARIABLES`) may instead be given as ``NAME_FILE``, naming a file that
holds it: Docker and Kubernetes mount secrets as files, and ``NAME_FILE`` is the convention the
PostgreSQL image and many tools follow. See :func:`secret_variable`.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
from collections.abc import Mapping

from memabra._errors import ConfigError

__all__ = [
    "FILE_SUFFIX",
    "KNOWN_VARIABLES",
    "PREFIX",
    "SECRET_VARIABLES",
    "empty_variable_error",
    "secret_variable",
    "unknown_variables",
    "unreported_unknown_variables",
    "warn_unknown_variables",
]

logger = logging.getLogger("memabra")

PREFIX = "MEMABRA_"
FILE_SUFFIX = "_FILE"

# The variables that hold secrets (a database URL carries its password), each of which may be
# given as NAME_FILE instead.
SECRET_VARIABLES: tuple[str, ...] = (
    "MEMABRA_DATABASE_URL",
    "MEMABRA_ADMIN_TOKEN",
    "MEMABRA_ADMIN_PASSWORD",
    "MEMABRA_ADMIN_REVIEWER_TOKEN",
    "MEMABRA_ADMIN_REVIEWER_PASSWORD",
)

# Every variable read anywhere in memabra (and its test suite), so that none of them is warned about.
KNOWN_VARIABLES: frozenset[str] = frozenset(
    {
        "MEMABRA_CONFIG",
        "MEMABRA_REWARD_WEIGHTS",
        "MEMABRA_FEEDBACK_WINDOW_SECONDS",
        "MEMABRA_EMBEDDING_MODEL",
        "MEMABRA_TEST_DATABASE_URL",
        "MEMABRA_TEST_ARTIFACTS",
        *SECRET_VARIABLES,
        *(name + FILE_SUFFIX for name in SECRET_VARIABLES),
    }
)

# A secret is a URL or a credential, never this large: a _FILE naming a big file by mistake (a
# log, a dump) is refused after reading this much, not loaded whole.
_MAX_SECRET_BYTES = 64 * 1024

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


# Secrets already read from files, by (variable, path): each file is read once per process, as a
# variable is, so every part of a process sees one value (a rotated secret takes effect on restart).
_secret_files: dict[tuple[str, str], str] = {}
_secret_files_lock = threading.Lock()


def secret_variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The secret ``$NAME``, else the text of the file ``$NAME_FILE`` names (one trailing newline
    removed, as ``echo`` and most secret tools write one; other whitespace is kept, as it may be part
    of the secret), else ``None``. ``$NAME`` set to nothing is returned as it is, for the caller to refuse.

    Raises :class:`ConfigError` naming the variables and the path, never the secret: both variables
    set (which one was meant is anyone's guess), ``$NAME_FILE`` empty, or naming a file that is
    missing, unreadable, empty, not UTF-8 text, larger than 64 KiB or of more than one line."""
    env = os.environ if environ is None else environ
    file_name = name + FILE_SUFFIX
    if file_name not in env:
        return env.get(name)
    if name in env:
        raise ConfigError(f"${name} and ${file_name} are both set; set only one of them")
    path = env[file_name]
    if not path.strip():
        raise ConfigError(empty_variable_error(file_name, "the path of a file holding the value"))
    with _secret_files_lock:
        cached = _secret_files.get((name, path))
        if cached is None:
            cached = _secret_files[(name, path)] = _read_secret_file(file_name, path)
    return cached


def _read_secret_file(variable: str, path: str) -> str:
    where = f"${variable} names {path}, which"
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_SECRET_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a folder, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > _MAX_SECRET_BYTES:
        raise ConfigError(f"{where} is larger than {_MAX_SECRET_BYTES // 1024} KiB; it must hold the value alone")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None
    # "\r\n" too: a file written on Windows ends its one line so
    text = text.removesuffix("\r\n") if text.endswith("\r\n") else text.removesuffix("\n")
    if not text.strip():
        raise ConfigError(f"{where} is empty; write the value into it")
    if "\n" in text or "\r" in text:
        # a value is one line; a second would silently become part of a password or URL
        raise ConfigError(f"{where} holds more than one line; it must hold the value alone")
    return text
