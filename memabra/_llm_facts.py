"""A chat model as the fact extractor: it reads the durable facts a message states and decides which
stored memories a new fact replaces. A reply that is not the JSON asked for falls back to the rules
of :mod:`memabra._facts`, which also cut the model's facts as they cut the user's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from memabra._facts import RuleFactExtractor, extract_facts, split_facts, strip_complaint

__all__ = ["LLMFactExtractor"]

logger = logging.getLogger("memabra")


class LLMFactExtractor:
    """Asks a chat model for the durable facts a message states about the user, and which stored
    memories a new fact replaces; falls back to the rules when a reply is not the JSON asked for."""

    PROMPT = (
        "Extract durable facts the user states about themselves (identity, preferences, constraints, "
        "circumstances) from the message. A complaint such as 'I already told you' is not a fact: keep only "
        "the fact it restates; a task for the assistant ('draft a message saying I am away') is not a fact either. "
        "Give each independent fact its own sentence: 'I live in Lyon and my dog is called Rex' is two facts, "
        "'I like salt and pepper' is one. A joke, a passing state ('I'm tired') or a request that follows a fact "
        "('I'm vegan so no cheese please': keep 'I'm vegan') is not a fact; what someone else says about the user "
        "('my doctor said I'm diabetic') is kept with who said it. "
        "Write each fact in the language of the message, not translated: the user's later questions are matched "
        "against it. Reply with a JSON list of short first-person sentences, or [] if there are none."
    )
    SUPERSEDE_PROMPT = (
        "The user has these stored memories, one per line as 'id: text'. A new fact arrived. Which stored "
        "memories does the new fact make outdated (the same subject, one that has a single current value, with "
        "a different, now wrong, value: where the user lives, their name, their job, a pet's name)? A passing "
        "state or event ('my dog is sick', 'my sister is visiting next week') makes no standing fact outdated, "
        "and facts that can hold together (allergies, likes, 'my sister is a doctor') do not replace each other; "
        "neither does a plan ('next month I'm moving to Berlin') or what someone else says about the user. "
        "Reply with a JSON list of ids, or [] if none."
    )

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    def _ask(self, system: str, human: str) -> object:
        reply = self.model.invoke([SystemMessage(system), HumanMessage(human)])
        content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        try:
            return json.loads(content)
        except json.JSONDecodeError:
            return None

    def __call__(self, text: str) -> list[str]:
        facts = self._ask(self.PROMPT, text)
        if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
            logger.info("fact extraction reply was not a JSON list of strings; using the rules")
            return extract_facts(text)
        # a model that joins facts anyway gets them cut as the rules would
        return [part for f in facts if f.strip() for part in split_facts(strip_complaint(f.strip()))]

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]:
        if not existing:
            return []
        listing = "\n".join(f"{mid}: {text}" for mid, text in existing)
        ids = self._ask(self.SUPERSEDE_PROMPT, f"Stored:\n{listing}\n\nNew fact: {fact}")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            logger.info("supersession reply was not a JSON list of ids; using the rules")
            return RuleFactExtractor().superseded(fact, existing)
        known = {mid for mid, _ in existing}
        return [i for i in ids if i in known]
