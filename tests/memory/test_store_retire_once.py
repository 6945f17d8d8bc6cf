"""A memory two processes retire at once has one retirement in its history.

A LangGraph store cannot check and write in one step: a process replacing "I live in Paris" in
``remember`` and another that read it before that write (settling a pair, or replacing it too)
both find it current and both retire it. Each retirement was its own history entry, so the
memory's history said it was retired twice (seen on SqliteStore with three worker processes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item, Op, Result, SearchOp
from langgraph.store.memory import InMemoryStore

from memabra import StoreMemory
from memabra._memory_records import MemoryAction, MemoryStatus

NS = ("memories", "{user_id}")
ANN = ("memories", "ann")


class _ReadBefore(BaseStore):
    """``store`` as a process that read ann's memories at ``before`` sees it: its reads return
    those items as they were then (writes go through), the race a store without transactions has."""

    def __init__(self, store: BaseStore, before: dict[str, Item]) -> None:
        self.store = store
        self.before = before

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return [self._as_before(op, found) for op, found in zip(ops, self.store.batch(ops), strict=True)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)

    def _as_before(self, op: Op, found: Any) -> Any:
        if isinstance(op, GetOp) and op.namespace == ANN:
            return self.before.get(op.key)
        if isinstance(op, SearchOp) and op.namespace_prefix == ANN:
            return [self.before[i.key] for i in found if i.key in self.before]
        return found


def _actions(memory: StoreMemory, memory_id: str) -> Sequence[MemoryAction]:
    return [c.action for c in memory.history("ann", memory_id)]


def test_a_memory_two_processes_replace_at_once_is_retired_once() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=NS)
    memory.remember("ann", "I live in Paris")
    [paris] = memory.list("ann")
    before = {i.key: i for i in store.search(ANN, limit=100)}
    StoreMemory(store, namespace=NS).remember("ann", "I live in Lyon")  # one process replaces it
    StoreMemory(_ReadBefore(store, before), namespace=NS).remember("ann", "I live in Lyon")  # read before that

    retired = next(r for r in memory.list("ann") if r.id == paris.id)
    assert retired.status is MemoryStatus.RETIRED
    actions = _actions(memory, paris.id)
    assert actions[0] is MemoryAction.CREATED and actions.count(MemoryAction.RETIRED) == 1, actions
