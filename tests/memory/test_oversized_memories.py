"""A memory is a fact, not a document: a text longer than MAX_MEMORY_CHARS is refused by every
write (remember, update, remember_many) and never extracted from a message, whose other facts
are still stored; a message of megabytes is read for facts only in its first
MAX_FACT_MESSAGE_CHARS characters."""

from __future__ import annotations

import logging

import pytest

from memabra import InvalidRecordError
from memabra._facts import MAX_FACT_MESSAGE_CHARS, MAX_MEMORY_CHARS, RuleFactExtractor, extract_facts
from memabra._memory import MemoryBackend

DOCUMENT = "I work at Acme and " + " ".join(f"the quarterly figure {n} rose again" for n in range(400))


def test_a_memory_longer_than_the_maximum_is_refused_by_every_write(memory: MemoryBackend) -> None:
    with pytest.raises(InvalidRecordError, match=f"at most {MAX_MEMORY_CHARS:,} characters"):
        memory.remember("ann", DOCUMENT)
    with pytest.raises(InvalidRecordError, match="nothing was written"):
        memory.remember_many("ann", ["I live in Lyon", DOCUMENT])
    assert memory.list("ann") == []
    kept = memory.remember("ann", "I live in Lyon")
    with pytest.raises(InvalidRecordError, match="not a document"):
        memory.update("ann", kept.id, DOCUMENT)
    assert [m.text for m in memory.list("ann")] == ["I live in Lyon"]
    at_limit = "I " + "a" * (MAX_MEMORY_CHARS - 2)
    assert memory.remember("ann", at_limit).text == at_limit


def test_a_pasted_document_stores_only_the_users_own_facts(
    memory: MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    message = f"I live in Lyon. Please summarise this report:\n{DOCUMENT}\nMy dog is called Rex."
    with caplog.at_level(logging.INFO, logger="memabra"):
        stored = memory.write_from_message("ann", message, RuleFactExtractor())
    assert sorted(m.text for m in stored) == ["I live in Lyon", "My dog is called Rex"]
    assert all(len(m.text) <= MAX_MEMORY_CHARS for m in memory.list("ann"))
    assert "not read for facts" in caplog.text


def test_a_message_of_megabytes_is_read_for_facts_only_in_its_start(caplog: pytest.LogCaptureFixture) -> None:
    filler = "\n".join(f"Line {n} of the server log says nothing." for n in range(300_000))  # ~12 MB
    message = f"I live in Lyon.\n{filler}\nI am vegetarian."
    assert len(message) > 100 * MAX_FACT_MESSAGE_CHARS
    with caplog.at_level(logging.INFO, logger="memabra"):
        assert extract_facts(message) == ["I live in Lyon"]
    assert f"only its first {MAX_FACT_MESSAGE_CHARS} characters are read" in caplog.text
    # a sentence cut at the limit is not read as a shorter fact
    cut = "x" * (MAX_FACT_MESSAGE_CHARS - 20) + ". I live in Lyon and I work at Acme every day."
    assert extract_facts(cut) == []


def test_a_model_extractors_document_sized_fact_is_skipped_and_the_others_are_kept(
    memory: MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    def summarising_model(message: str) -> list[str]:  # a model extractor that returns a summary
        return ["I live in Lyon", DOCUMENT, "My dog is called Rex"]

    with caplog.at_level(logging.INFO, logger="memabra"):
        stored = memory.write_from_message("ann", "anything", summarising_model)
    assert sorted(m.text for m in stored) == ["I live in Lyon", "My dog is called Rex"]
    assert any("were not remembered" in r.getMessage() for r in caplog.records)


def test_a_fact_over_the_limit_only_once_composed_is_skipped_not_failing_the_message(
    memory: MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    # U+095C (Devanagari DDDHA, as some Hindi keyboards type it) composes (NFC) to two characters:
    # 2,000 characters as extracted, 3,989 as remember() would store them
    hindi = "My note is " + "\u095c" * (MAX_MEMORY_CHARS - 11)

    def model(message: str) -> list[str]:
        return [hindi, "I live in Lyon"]

    with caplog.at_level(logging.INFO, logger="memabra"):
        stored = memory.write_from_message("ann", "anything", model)
    assert [m.text for m in stored] == ["I live in Lyon"]
    assert any("were not remembered" in r.getMessage() for r in caplog.records)
