"""Embeddings computed once and kept: the router's encoder, backed by the episode log.

:func:`prepare_encoder` finds the encoder the router scores with, keeps its vectors in the log's
``embeddings`` table and starts loading the model in the background while the agent is built;
:func:`warm` makes sure a candidate pool's vectors are in the process cache before the router
sees it — read from the table when another process (or an earlier run) computed them, computed in
one batch and stored otherwise. A fresh process therefore embeds only the query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from memabra._errors import ConfigError
from memabra._records import Candidate
from memabra.router import CachingEncoder, Router, default_encoder
from memabra.storage import EmbeddingTable, EpisodeLog
from memabra.storage._embeddings import check_model_name

__all__ = ["prepare_encoder", "warm"]

logger = logging.getLogger("memabra")


def prepare_encoder(router: Router, log: EpisodeLog, *, preload: bool = True) -> CachingEncoder | None:
    """The router's caching encoder, backed by ``log`` (``None`` when it scores lexically only or
    with an encoder memabra cannot cache)."""
    similarity = getattr(router, "similarity", None)
    encoder = similarity.encoder if similarity is not None else default_encoder()
    if not isinstance(encoder, CachingEncoder):
        return None
    # stored vectors are keyed by this name: refused here, at build, rather than at a turn's first write
    name = encoder.name
    try:
        check_model_name(name)
    except ValueError as exc:
        raise ConfigError(f"{exc} (the encoder's `name` attribute)") from None
    logger.info("router embeddings: encoder %s, vectors stored in the log under that name", name)
    encoder.attach(EmbeddingTable(log.engine))
    if preload:
        encoder.preload()
    return encoder


def warm(encoder: CachingEncoder | None, candidates: Sequence[Candidate]) -> None:
    if encoder is None or not candidates:
        return
    computed = encoder.warm([c.text for c in candidates])
    if computed:
        logger.info("embedded %d new candidate texts (stored for every process)", computed)
