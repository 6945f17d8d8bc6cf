"""A router of your own in an agent: its learner starts fresh from its class (not from a list of
built-in policies), checkpoints, and a new agent, the learner's restart and a hot reload restore it
from its snapshots."""

from __future__ import annotations

import json

import numpy as np
from langchain_core.messages import AIMessage, HumanMessage
from numpy.typing import NDArray

from factories import readable_final_rewards
from fakes import ScriptedChatModel
from memabra import STOP_ID, Budget, Selection, create_memabra_agent
from memabra._replay import replay
from memabra.router import Router, SlotCredit, SlotView, learned_model
from memabra.storage import EpisodeLog, LearnerStore


class CreditSum(Router):
    """Per-candidate summed credit; a tenth of the mass spread evenly."""

    name = "credit-sum"

    def _init_model(self) -> None:
        self.credit: dict[str, float] = {}

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        scores = np.array([self.credit.get(view.table.candidates[i].id, 0.0) for i in view.eligible])
        out = np.full(view.n_options, 0.1 / view.n_options)
        out[int(np.argmax(scores + 0.01 * view.table.column("hyb_z")[view.rows]))] += 0.9
        return out

    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        for draw, credit in zip(selection.slots, credits, strict=True):
            if draw.chosen_id != STOP_ID:
                self.credit[draw.chosen_id] = self.credit.get(draw.chosen_id, 0.0) + credit.credit

    def _model_bytes(self) -> bytes:
        return json.dumps(self.credit, sort_keys=True).encode()

    def _load_model(self, payload: bytes) -> None:
        self.credit = json.loads(payload) if payload else {}


def _agent(log: EpisodeLog, lexical, tools):  # type: ignore[no-untyped-def]
    return create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("Noted.")] * 10),
        tools=tools,
        db=log,
        router=CreditSum(similarity=lexical),
        budget=Budget(max_tokens=400),
        snapshot_every=2,
    )


def test_a_router_of_your_own_learns_checkpoints_and_resumes_in_an_agent(
    log: EpisodeLog, lexical, tools, caplog
) -> None:  # type: ignore[no-untyped-def]
    with _agent(log, lexical, tools) as agent:
        agent.session.memory.remember("ann", "I live in Lyon")
        for i in range(4):
            out = agent.invoke(
                {"messages": [HumanMessage("Where do I live?")]},
                {"configurable": {"thread_id": f"c{i}"}},
                context={"user_id": "ann"},
            )
            agent.feedback(out["memabra_episode_id"], correct=True, final=True)
        # on PostgreSQL a reward is readable once every older transaction on the server ended
        # (another test's may be open): learn what a feedback's own step could not read yet
        readable_final_rewards(LearnerStore(log.engine), at_least=4)
        agent.session.learn_pending()
    assert "learner's step failed" not in caplog.text
    state = LearnerStore(log.engine).checkpoint("credit-sum")
    assert state is not None and state.learned == 4 and state.snapshot_version is not None
    saved = log.get_snapshot(state.snapshot_version)
    replayed, n = replay(log, "credit-sum", classes=(CreditSum,))
    assert n == 4 and learned_model(replayed.snapshot()) == learned_model(saved)
    resumed = _agent(log, lexical, tools)
    assert resumed.router.policy_version == state.snapshot_version
    resumed.close()
