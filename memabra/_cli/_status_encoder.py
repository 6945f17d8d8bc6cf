"""The encoder ``memabra status`` reports: the embedding-model setting (its value and where it came
from) and the key the agent's vectors are stored under. Split from :mod:`memabra._cli._status`.

Read without loading the model (a status check must stay cheap, and torch takes seconds to import):
the key is :func:`memabra.router.default_encoder`'s name, which hashes a model folder's files but
loads nothing. A setting naming no usable model is returned as its error, for the check to show as
a problem; the agent would refuse to start on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from memabra._errors import MemabraError
from memabra._health import ENCODER_CHECK, StoredVectors

__all__ = ["ENCODER_CHECK", "EncoderState", "encoder_line", "read_encoder"]


@dataclass(frozen=True, slots=True)
class EncoderState:
    """The deployment's encoder as this process's environment and config file name it."""

    model: str | None
    """The setting's value (``None``: nothing named, the bundled MiniLM or BM25 alone)."""
    source: str | None
    """``$MEMABRA_EMBEDDING_MODEL``, or the config file and its key; ``None`` when not set."""
    key: str | None
    """The encoder key its vectors are stored under; ``None``: BM25 alone, or the setting is bad."""
    error: str | None
    """Why the setting names no usable model (``None``: it does)."""
    key_read: bool = True
    """Whether ``key`` was read: a named model folder's key hashes its files (seconds for a large
    model, on every probe), so ``memabra status`` reads it under ``--exact`` only."""


def read_encoder(*, key: bool = True) -> EncoderState:
    """The setting and its key; a bad setting (or config file) is returned as ``error``, never raised.
    ``key=False`` checks that the setting names a usable model without hashing its files (the
    bundled model's key is its plain name, read either way)."""
    # imported here: `memabra status` must start without the router package (and never imports torch)
    from memabra._config import load_embedding_model
    from memabra.router import default_encoder

    try:
        setting = load_embedding_model()
    except MemabraError as exc:
        return EncoderState(None, None, None, str(exc))
    model, source = (setting.model, setting.source) if setting is not None else (None, None)
    try:
        encoder = default_encoder()
        if encoder is not None and setting is not None and not key:
            return EncoderState(model, source, None, None, key_read=False)
        name = encoder.name if encoder is not None else None
    except (MemabraError, OSError) as exc:  # OSError: a folder that vanished or cannot be read mid-hash
        return EncoderState(model, source, None, str(exc))
    return EncoderState(model, source, name, None)


def encoder_line(encoder: EncoderState, vectors: tuple[StoredVectors, ...]) -> str:
    """One line: the key and where its model was named, and whether any vector is stored under it
    (none after a model change means every text is embedded again, on the agent's first turns)."""
    if encoder.error is not None:
        named = f"{encoder.model} (from {encoder.source})" if encoder.model is not None else "the setting"
        return f"encoder   {named} is not usable: see the problem below"
    if not encoder.key_read:
        return f"encoder   {encoder.model} (from {encoder.source}; its vector key with --exact: it hashes the model's files)"
    if encoder.key is None:
        return "encoder   none: BM25 alone (the embeddings extra is not installed; MEMABRA_EMBEDDING_MODEL not set)"
    origin = (
        f"{encoder.model}, from {encoder.source}"
        if encoder.model is not None
        else "the bundled all-MiniLM-L6-v2; MEMABRA_EMBEDDING_MODEL not set"
    )
    stored = next((v for v in vectors if v.model == encoder.key), None)
    count = (
        "no vector stored under it yet"
        if stored is None
        else f"{stored.vectors:,}{'+' if stored.capped else ''} vectors stored under it"
    )
    return f"encoder   {encoder.key} ({origin}; {count})"
