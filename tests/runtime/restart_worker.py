"""A serving process for the restart test: ``python restart_worker.py URL learn|serve``.

``learn``: 30 turns with final feedback, a snapshot, the decision for seed 7, then 5 more turns
learned but not committed, then SIGKILL. ``serve``: the decision for seed 7 as a new process sees it."""

from __future__ import annotations

import json
import os
import signal
import sys

from memabra import Budget, CandidateKind, RoutingContext, build_session
from memabra.router import LinearRouter, Similarity

QUERY = "suggest a restaurant for dinner"


def decision(session) -> dict:  # type: ignore[no-untyped-def]
    candidates = [m.as_candidate() for m in session.memory.items("ann")]
    context = RoutingContext(QUERY, "ann", kinds=(CandidateKind.MEMORY,), budget=session.budget)
    sel = session.router.choose(context, candidates, seed=7)
    return {
        "version": session.router.policy_version,
        "chosen": list(sel.chosen_ids),
        "p": [list(d.probabilities) for d in sel.slots],
    }


def main(url: str, mode: str) -> None:
    router = LinearRouter(seed=0, similarity=Similarity(encoder=None), epsilon=0.2)
    session = build_session(
        db=url, router=router, budget=Budget(max_tokens=200, slots={CandidateKind.MEMORY: 2}), snapshot_every=1000
    )
    if mode == "serve":
        print(json.dumps(decision(session)), flush=True)
        session.close()
        return
    diet = session.memory.remember("ann", "I am vegetarian")
    for i in range(6):
        session.memory.remember("ann", f"Restaurant note {i}: the place downtown had a long queue")

    def turn(i: int) -> None:
        t = session.begin(user_id="ann", query=QUERY, thread_id=f"t{i}")
        eid = session.finish(t.id, "Green Garden is vegetarian")
        helped = t.selection is not None and diet.id in t.selection.chosen_ids
        session.feedback(eid, correct=helped, final=True)

    for i in range(30):
        turn(i)
    session.save_snapshot()
    print(json.dumps(decision(session)), flush=True)
    for i in range(30, 35):
        turn(i)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
