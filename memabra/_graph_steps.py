"""What the built-in agent and the middleware log beyond the session's ``record_*`` calls: a tool
call's outcome as LangGraph's ``ToolNode`` reports it, a call refused or cut off, and a turn that
ended in an exception. Both entry points use these, so a log reads the same whichever built it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig

from memabra._errors import InvalidRecordError
from memabra._graph_io import content_text, message_text, run_allowed_tools, run_thread_id, run_user_id
from memabra._paused_turns import FAILED_TURN_SOURCE
from memabra._records import Feedback, FeedbackKind, Step, StepKind
from memabra._session import RoutingSession, Turn
from memabra._turns import jsonable

__all__ = [
    "FAILED_TURN_SOURCE",
    "close_failed_turn",
    "current_turn",
    "cut_off_error",
    "error_text",
    "failure_reason",
    "finishing_turn",
    "log_text",
    "out_of_steps_error",
    "record_raised",
    "record_result",
    "refuse",
    "state_field",
    "state_turn_id",
    "unavailable_error",
]

logger = logging.getLogger("memabra")


def state_field(state: Any, key: str, default: Any = None) -> Any:
    """A key of a graph's state as a node or a tool call receives it: a dict (a ``TypedDict``
    state), or an object (a pydantic or dataclass state, given as the model itself)."""
    if isinstance(state, Mapping):
        return state.get(key, default)
    return getattr(state, key, default)


def state_turn_id(state: Any) -> str:
    """The turn the graph's state names; a clear error where the graph never routed one."""
    turn_id = state_field(state, "memabra_turn")
    if not isinstance(turn_id, str) or not turn_id:
        raise InvalidRecordError(
            "the state names no memabra turn: declare memabra_turn and memabra_episode_id in the graph's state"
            " (or subclass MemabraNodeState) and run nodes.route before this node"
        )
    return turn_id


def current_turn(
    session: RoutingSession,
    turn_id: str,
    messages: Sequence[AnyMessage],
    runtime: Any,
    config: RunnableConfig | None,
    *,
    pending_allowed: Callable[[str], bool] | None = None,
) -> Turn:
    """The turn the graph's state names: in flight here (past its pause, where an interrupt paused
    it), else the one an interrupt paused and the log keeps, else routed again.

    A fork goes on from an earlier point of a turn already logged: a run sent back to a checkpoint
    taken before the turn's answer (LangGraph time travel: a chat UI's "Regenerate" re-invokes the
    checkpoint before the answer, or ``update_state`` removed it). ``messages`` then hold the
    answer of none of the turn's logged decisions (one per branch, once regenerated): the turn is
    routed afresh, a new decision under the turn's next decision id, so the regenerated answer is
    its own episode with its own propensities, and the other branches' stay as they were logged.
    A run that goes on after its own logging node (a ``Command(goto=...)`` beside a pending node,
    a retry of a run killed after it logged) holds its decision's answer, and goes on with that
    decision, whichever branch it is on (:func:`~memabra._turn_decisions.logged_decisions`). A
    logged turn still in flight here is another branch's where ``messages`` hold fewer replies
    since the user's message than it made model calls.

    A checkpointed run can go on where this process never saw it start (resumed after an
    interrupt in another worker, or after a restart): a turn paused by an ``interrupt`` in
    memabra's own nodes or hooks, or between nodes in a run :class:`~memabra.MemabraAgent` drove,
    was kept in the log (:meth:`RoutingSession.suspend`) and goes on whole. Otherwise (paused
    between nodes of a run driven some other way, or retried after its turn was logged as
    failed) the turn is routed afresh under the same id
    (:meth:`RoutingSession.resume`), under the run's ``allowed_tools`` as its first routing was
    (read from the run's context again: this process has no other record of them);
    ``pending_allowed`` is given at the tools step: the calls the last reply made were answered
    with a lost turn's tools bound (an approved interrupt among them), so the ones it allows (and
    the run may use) are bound to the new turn rather than refused."""
    forked = False
    try:
        turn = session.get_turn(turn_id)
    except InvalidRecordError:
        pass
    else:
        going_on = turn if turn.paused_at is None else session.unpause(turn)
        if going_on is not None and not _forked(going_on, messages):
            return going_on
        if going_on is not None:  # another branch's logged decision: not this run's
            session.abandon(turn_id)
            forked = True
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    if not humans:
        raise InvalidRecordError(f"turn {turn_id!r} is not in flight and the state holds no user message to route")
    last = messages[-1]
    pending = (
        [c["name"] for c in last.tool_calls if pending_allowed(c["name"])]
        if pending_allowed is not None and isinstance(last, AIMessage)
        else []
    )
    # a decision the log holds goes on only where these messages hold its answer (the branch's own)
    return session.resume(
        turn_id,
        user_id=run_user_id(runtime, config),
        query=message_text(humans[-1]),
        thread_id=run_thread_id(config),
        turn=len(humans) - 1,
        bind=pending,
        messages=messages,
        allowed_tools=run_allowed_tools(runtime),
        fork=forked,
    )


def _forked(turn: Turn, messages: Sequence[AnyMessage]) -> bool:
    """Whether ``turn``, going on in a run whose state holds ``messages``, is a decision logged on
    another branch of the run (:func:`current_turn`): logged with more model calls than the
    messages hold replies since the turn's user message."""
    if not turn.logged:
        return False
    last_human = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    replies = sum(isinstance(m, AIMessage) for m in messages[last_human + 1 :])
    return replies < sum(s.kind is StepKind.MODEL for s in turn.steps)


def finishing_turn(session: RoutingSession, turn_id: str, messages: Sequence[AnyMessage] = ()) -> Turn | None:
    """The turn a run is about to log, going on here: in flight (past its pause, where the run
    paused here), else the one the log keeps (the run paused in another process, or before a
    restart, or its process died: with the steps ``messages`` show it lacks), else the one its
    logging node already logged (a second logging node beside a pending one, a retry of a run
    killed after it logged: :meth:`RoutingSession.finish` logs nothing and names that episode).
    Never routed afresh: a decision made now would be credited with an answer it did not shape.

    ``None`` (with a warning) where there is none to log: its episode was logged while the run was
    paused (an operator abandoned the turn), or nobody kept it (a run driven without
    :class:`~memabra.MemabraAgent` that paused between nodes in another worker). The run still
    ends with its answer; it has no episode of its own."""
    try:
        turn: Turn | None = session.get_turn(turn_id)
    except InvalidRecordError:
        turn = None
    if turn is not None and turn.paused_at is not None:
        turn = session.unpause(turn)  # None: logged meanwhile, by an operator or another logging node
    if turn is None:
        turn = session.kept_turn(turn_id, messages)
    if turn is None:
        logger.warning(
            "turn %s is not in flight here and the log keeps no pause of it (abandoned, or paused where"
            " no MemabraAgent kept it): there is no routing decision to log it with",
            turn_id,
        )
    return turn


def unavailable_error(name: str) -> str:
    return f"tool {name!r} is not available in this turn"


def cut_off_error(limit: int) -> str:
    return f"not run: this turn's limit of {limit} tool round{'' if limit == 1 else 's'} was reached"


def out_of_steps_error() -> str:
    return "not run: the run's recursion_limit left no steps for this call and the turn's end"


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _args(call: ToolCall | Mapping[str, Any]) -> Mapping[str, Any]:
    args = call.get("args")
    return args if isinstance(args, Mapping) else {}


def refuse(session: RoutingSession, turn_id: str | None, call: ToolCall | Mapping[str, Any], error: str) -> ToolMessage:
    """Log a call that was not run as a failed step (``turn_id`` ``None``: a run with no turn to
    log it in); the error ToolMessage that answers it."""
    name = str(call.get("name") or "")
    if turn_id is not None:
        session.record_tool_call(turn_id, name, _args(call), result=None, status="error", error=error)
    return ToolMessage(content=f"Error: {error}", tool_call_id=call["id"], name=name, status="error")


def record_raised(
    session: RoutingSession, turn_id: str, call: ToolCall, exc: BaseException, started: float
) -> ToolMessage:
    """Log a tool that raised; the error ToolMessage shown to the model instead (an outcome, not a crash)."""
    error = error_text(exc)
    session.record_tool_call(
        turn_id, call["name"], _args(call), result=None, status="error", error=error, latency_ms=_ms(started)
    )
    return ToolMessage(content=f"Error: {error}", tool_call_id=call["id"], name=call["name"], status="error")


def _answer_to(result: Any, call_id: str | None) -> ToolMessage | None:
    """The ToolMessage answering ``call_id`` in what a tool gave: the message itself, or one a
    ``Command`` (or a list of them) carries in its update."""
    if isinstance(result, ToolMessage):
        return result if result.tool_call_id == call_id else None
    if isinstance(result, Sequence) and not isinstance(result, str):
        return next((m for m in (_answer_to(r, call_id) for r in result) if m is not None), None)
    update = getattr(result, "update", None)
    messages = update.get("messages") if isinstance(update, Mapping) else None
    return _answer_to(messages, call_id) if messages is not None else None


def record_result(session: RoutingSession, turn_id: str, call: ToolCall, result: Any, started: float) -> bool:
    """Log a tool call's outcome (a ToolMessage, or a Command carrying one); a ToolMessage with
    ``status="error"`` (e.g. a tool's handled ToolException) is a failed step. True when it succeeded."""
    answer = _answer_to(result, call["id"])
    failed = answer is not None and answer.status == "error"
    text = log_text(answer.content) if answer is not None else repr(result)
    session.record_tool_call(
        turn_id,
        call["name"],
        _args(call),
        result=None if failed else text,
        status="error" if failed else "ok",
        error=text if failed else None,
        latency_ms=_ms(started),
    )
    return not failed


def log_text(content: str | list[Any]) -> str:
    """A ToolMessage's content as the log keeps it: its text, as standard JSON where it is JSON.

    A tool's non-text output reaches the model as ``json.dumps`` writes it (what ToolNode sends),
    which spells non-finite floats ``NaN`` / ``Infinity``: no JSON reader accepts those, so the log
    writes them as strings, the way it logs tool arguments."""
    text = content_text(content)
    if "NaN" not in text and "Infinity" not in text:
        return text
    constants: list[str] = []

    def constant(name: str) -> float:
        constants.append(name)
        return float(name)

    try:
        value = json.loads(text, parse_constant=constant)
    except ValueError:
        return text
    # A bare "NaN" is text as much as JSON: kept as the model saw it.
    if not constants or not isinstance(value, (dict, list)):
        return text
    return json.dumps(jsonable(value), ensure_ascii=False)


# Longest reason a failed turn's feedback keeps: a line a reviewer reads, never a traceback.
MAX_FAILURE_REASON = 300


def failure_reason(cause: str, error: str) -> str:
    """Why a turn failed, as its ``accepted: false`` feedback records it: ``cause`` (a stable word
    to filter on: ``recursion_limit``, or ``model_error`` / ``tool_error`` with the step's name) and the first line of
    ``error`` (``error_text``: the exception's type and message), unprintable characters and runs
    of blanks collapsed, cut to :data:`MAX_FAILURE_REASON` characters. Only what the exception's
    own message says is kept; the rest of a long message (a provider's response body) is not."""
    lines = [line for line in error.splitlines() if line.strip()] or [""]
    # an exception whose message starts on a new line: error_text's first line is only its type
    first = f"{lines[0]} {lines[1]}" if lines[0].rstrip().endswith(":") and len(lines) > 1 else lines[0]
    text = " ".join("".join(c if c.isprintable() else " " for c in f"{cause}: {first}").split())
    return text if len(text) <= MAX_FAILURE_REASON else text[: MAX_FAILURE_REASON - 1] + "…"


def _step_reason(steps: Sequence[Step]) -> str | None:
    """The reason the turn's last failed step gives (a model or tool call that raised)."""
    failed = next((s for s in reversed(steps) if s.status != "ok"), None)
    if failed is None:
        return None
    return failure_reason(f"{failed.kind.value}_error ({failed.name})", failed.error or failed.status)


def close_failed_turn(
    session: RoutingSession, turn_id: str, failure: Step | None = None, *, reason: str | None = None
) -> str | None:
    """Log a turn that ended in an exception, so it neither stays in flight nor vanishes from the log.

    The episode keeps its selection and propensities (an offline evaluation that lost failing
    turns would be biased), ``failure`` as its last step, and ``accepted: false`` feedback, so S is
    0 until someone's verdict says otherwise; the facts the user stated are stored. The feedback's
    ``comment`` says why (``reason``, else the last failed step's error: :func:`failure_reason`),
    so a reviewer of the episode need not find the warning logged when it failed; the reward
    reads no ``comment``. Returns the episode id, or ``None`` when nothing was in flight or
    logging failed (then the turn is dropped and a warning logged: the caller is already raising
    the turn's own exception)."""
    try:
        turn = session.get_turn(turn_id)
    except InvalidRecordError:
        return None
    if failure is not None:
        turn.steps.append(failure)
    payload: dict[str, Any] = {"accepted": False}
    comment = reason if reason is not None else _step_reason(turn.steps)
    if comment:
        payload["comment"] = comment
    turn.feedback.append(Feedback(turn.episode_id, FeedbackKind.PROGRAMMATIC, FAILED_TURN_SOURCE, payload))
    try:
        return session.finish(turn_id, "")
    except Exception:
        session.abandon(turn_id)
        logger.warning("could not log the failed turn %s (episode %s)", turn_id, turn.episode_id, exc_info=True)
        return None
