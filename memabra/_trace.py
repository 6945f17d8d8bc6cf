"""Each routing decision in the run's trace, as a retriever run of the route step.

A team reading an agent's runs in LangSmith, Langfuse or any LangChain callback handler saw the
route step's output as a bare turn id: which memories, skills and tools went into the context, with
which probabilities and under which policy snapshot, was only in memabra's own log. The decision
now appears as a child run of the route step named :data:`TRACE_RUN_NAME`, of the retriever type
those tools render as documents: one :class:`~langchain_core.documents.Document` per chosen
candidate (its text, and its id, kind, slot, probability, score, rank and tokens), and the run's
metadata names the episode (``memabra_episode_id``, to find the trace from the admin view and back),
the policy and its version; not the user, whom the episode names to those who may read the log. ``astream_events`` streams it as ``on_retriever_end``: a chat UI can
show what the answer was given.

The run is reported once the decision is made (its start and end together): the route step around
it is the span whose duration is the routing's. Nothing is built when no handler listens. Only the
documents chosen are traced, never the candidates left out: the trace holds what the model saw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_callback_manager_for_config

from memabra._records import STOP_ID, Selection

if TYPE_CHECKING:
    from memabra._turns import Turn

__all__ = ["TRACE_RUN_NAME", "trace_decision"]

TRACE_RUN_NAME = "memabra_route"


def trace_decision(turn: Turn, config: RunnableConfig | None) -> None:
    """Report ``turn``'s routing decision to the callback handlers of ``config`` (the route step's)."""
    selection = turn.selection
    if config is None or selection is None:
        return
    manager = get_callback_manager_for_config(config)
    if not manager.handlers:
        return
    manager.add_metadata(
        {
            "memabra_episode_id": turn.episode_id,
            "memabra_policy": selection.policy,
            "memabra_policy_version": selection.policy_version,
            "memabra_propensity": selection.propensity,
            "memabra_offered": len(selection.offered),
            "memabra_tokens_injected": selection.tokens_injected,
            "memabra_latency_ms": selection.latency_ms,
        },
        inherit=False,
    )
    run = manager.on_retriever_start(None, turn.query, name=TRACE_RUN_NAME)
    run.on_retriever_end(_chosen_documents(selection))


def _chosen_documents(selection: Selection) -> list[Document]:
    documents = []
    for draw in selection.slots:
        if draw.chosen_id == STOP_ID:
            continue
        scored = selection.scored(draw.chosen_id)
        candidate = scored.candidate
        documents.append(
            Document(
                page_content=candidate.text,
                metadata={
                    "id": candidate.id,
                    "kind": candidate.kind.value,
                    "slot": draw.slot,
                    "probability": draw.chosen_probability,
                    "score": scored.score,
                    "rank": scored.rank,
                    "tokens": candidate.tokens,
                },
            )
        )
    return documents
