"""Routers: decide which memories, skills and tools enter an agent's context, slot by slot, with
logged propensities, and learn from the composite reward.

Every router implements :class:`Router` -- ``choose`` / ``learn`` / ``learn_logged`` /
``slot_probabilities`` / ``snapshot`` / ``restore`` / ``policy_version`` -- and passes
:func:`check_router`. :class:`LinearRouter` (numpy) is the default learner, :class:`VWRouter` the
Vowpal Wabbit one; the baselines rank by similarity (lexical, semantic, hybrid), at random or
by a fixed list. :class:`SnapshotWatcher` serves the newest policy snapshot without a restart.
"""

from __future__ import annotations

from memabra.router._base import Router, SlotView
from memabra.router._baselines import EmbeddingRouter, FixedListRouter, HybridRouter, LexicalRouter, RandomRouter
from memabra.router._conformance import check_router
from memabra.router._credit import SlotCredit, slot_credits
from memabra.router._features import NUMERIC_FEATURES, CandidateStats, FeatureTable, context_features, featurize, recall
from memabra.router._linear import LinearRouter
from memabra.router._most_probable import most_probable_slate
from memabra.router._residual import ResidualRouter
from memabra.router._similarity import (
    BM25,
    CachingEncoder,
    Encoder,
    SentenceTransformerEncoder,
    Similarity,
    VectorBacking,
    default_encoder,
    embeddings_available,
)
from memabra.router._vw import VWRouter
from memabra.router._watcher import SnapshotWatcher, learned_model, load_router

__all__ = [
    "BM25",
    "NUMERIC_FEATURES",
    "CachingEncoder",
    "CandidateStats",
    "EmbeddingRouter",
    "Encoder",
    "FeatureTable",
    "FixedListRouter",
    "HybridRouter",
    "LexicalRouter",
    "LinearRouter",
    "RandomRouter",
    "ResidualRouter",
    "Router",
    "SentenceTransformerEncoder",
    "Similarity",
    "SlotCredit",
    "SlotView",
    "SnapshotWatcher",
    "VWRouter",
    "VectorBacking",
    "check_router",
    "context_features",
    "default_encoder",
    "embeddings_available",
    "featurize",
    "learned_model",
    "load_router",
    "most_probable_slate",
    "recall",
    "slot_credits",
]
