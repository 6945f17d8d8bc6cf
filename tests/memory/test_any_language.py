"""Users who do not write in English: recall, the token budget and usage work in their script.

Chinese, Japanese and Korean text has no spaces between words; Russian and German have words the
ASCII-only patterns cut apart ("москве" matched nothing, "heißt" became "hei"). English text must
tokenise exactly as before (the learners' hashed features and stored token counts rest on it).
"""

from __future__ import annotations

import random
import re
import string
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from fakes import ScriptedChatModel
from memabra import Budget, create_memabra_agent
from memabra._text import approx_tokens, content_words
from memabra.router import HybridRouter, Similarity
from memabra.router._text import analyze

BENCH_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bench"

DOG = {
    "zh": ("我的狗叫旺财", "我的狗叫什么名字？", "你的狗叫旺财。"),
    "ja": ("私の犬の名前はポチです", "犬の名前は何ですか？", "あなたの犬はポチです。"),
    "ko": ("우리 강아지 이름은 초코예요", "강아지 이름이 뭐예요?", "강아지 이름은 초코예요."),
    "ru": ("Мою собаку зовут Шарик", "Как зовут мою собаку?", "Вашу собаку зовут Шарик."),
    "de": ("Mein Hund heißt Bello", "Wie heißt mein Hund?", "Dein Hund heißt Bello."),
}
OTHERS = {
    "zh": ["我对贝类过敏", "我住在上海", "我喜欢喝绿茶", "我在银行工作", "我的生日是五月三日", "我每天早上跑步"],
    "ja": ["私は東京に住んでいます", "私は魚が好きです", "私は銀行で働いています", "毎朝コーヒーを飲みます"],
    "ko": ["저는 서울에 살아요", "저는 커피를 좋아해요", "저는 은행에서 일해요", "매일 아침 달리기를 해요"],
    "ru": ["Я живу в Москве", "Я вегетарианец", "Я работаю в банке", "Я люблю зелёный чай"],
    "de": ["Ich wohne in München", "Ich bin Vegetarierin", "Ich arbeite bei einer Bank", "Ich trinke gern Tee"],
}


# ---------------------------------------------------------------------------- the tokenisers
def test_words_of_every_script_are_whole_and_cjk_runs_are_character_pairs() -> None:
    assert analyze("Я живу в Москве") == ("живу", "москве")
    assert analyze("Ich wohne in MÜNCHEN, Straße 5") == ("ich", "wohne", "münchen", "strasse")
    assert analyze("东京塔") == ("东京", "京塔")
    assert analyze("python编程 猫") == ("python", "编程", "猫")
    assert analyze("ＡＩ ２０２４") == ("ai", "2024")  # full-width forms read as ASCII
    assert content_words("Я живу в Москве") == {"живу", "москве"}
    assert content_words("Je suis végétarien") == {"je", "suis", "végétarien"}
    assert content_words("我住在上海") == {"我住", "住在", "在上", "上海"}
    assert content_words("I don’t eat meat") == content_words("I don't eat meat")


def test_a_sentence_without_spaces_costs_a_token_per_character() -> None:
    assert approx_tokens("我对贝类过敏，我住在上海") == 12  # 11 characters and a comma
    assert approx_tokens("私は東京に住んでいます") == 11
    assert approx_tokens("Ich wohne in München") == 5  # whitespace words x 1.3, as for English
    assert approx_tokens("I live in 上海 now") == round(1.3 * 4 + 2)


# The tokenisers before they read other scripts, kept verbatim: English must come out the same.
_OLD_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_OLD_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")


def _old_analyze(text: str) -> tuple[str, ...]:
    from memabra.router._text import _CAMEL, _SEPARATORS, STOP_WORDS

    spaced = _SEPARATORS.sub(" ", _CAMEL.sub(" ", text)).replace("_", " ")
    return tuple(t for t in _OLD_TOKEN.findall(spaced.lower()) if t not in STOP_WORDS)


def _old_content_words(text: str) -> frozenset[str]:
    from memabra._text import _STOP

    return frozenset(w.strip("'-") for w in _OLD_WORD.findall(text.lower()) if w not in _STOP and len(w) > 1)


def _old_approx_tokens(text: str) -> int:
    return max(1, round(1.3 * len(text.split()))) if text.strip() else 0


def _english_texts() -> list[str]:
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + " '-_.,:/#|!?\t\n"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20_000)]
    texts += ["getWeatherForecast lawyer.search I'm vegetarian, don't-care 'quoted' it's - i- x"]
    if BENCH_DIR.is_dir():  # every text of the shared bench files, where the checkout has them
        import json

        def strings(value: object) -> list[str]:
            if isinstance(value, str):
                return [value]
            if isinstance(value, dict):
                return [s for v in value.values() for s in strings(v)]
            if isinstance(value, list):
                return [s for v in value for s in strings(v)]
            return []

        for path in sorted(BENCH_DIR.glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                texts += strings(json.loads(line))
    return texts


def test_english_tokenises_exactly_as_before() -> None:
    for text in _english_texts():
        assert analyze(text) == _old_analyze(text), text
        assert approx_tokens(text) == _old_approx_tokens(text), text
        if text.isascii():
            assert content_words(text) == _old_content_words(text), text


# ---------------------------------------------------------------------------- in an agent
@pytest.mark.parametrize("language", sorted(DOG))
def test_a_users_own_language_recalls_the_memory_asked_about_and_counts_it_used(memory_log, language: str) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    fact, question, answer = DOG[language]
    for other in OTHERS[language]:
        memory.remember("mei", other)
    dog = memory.remember("mei", fact)
    model = ScriptedChatModel(replies=[AIMessage(answer)])
    agent = create_memabra_agent(
        model,
        memory=memory,
        db=log,
        # lexical only: what this test checks is the tokeniser, not an encoder's languages
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=300),
    )
    out = agent.invoke(
        {"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": "t"}}, context={"user_id": "mei"}
    )
    episode = log.get_episode(out["memabra_episode_id"])
    [selection] = episode.selections
    assert selection.chosen_ids[0] == dog.id  # ranked first among the user's memories
    assert episode.used_ids is not None and dog.id in episode.used_ids


def test_long_memories_in_chinese_respect_the_token_budget(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    long_a = memory.remember("mei", "我的狗叫旺财" + "，它喜欢在公园里追球" * 14)
    long_b = memory.remember("mei", "我的猫叫咪咪" + "，它喜欢在窗台上睡觉" * 14)
    assert long_a.tokens > 100 and long_b.tokens > 100
    model = ScriptedChatModel(replies=[AIMessage("好的。")])
    agent = create_memabra_agent(
        model,
        memory=memory,
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=long_a.tokens + 20),
    )
    out = agent.invoke(
        {"messages": [HumanMessage("我的狗和猫叫什么？")]},
        {"configurable": {"thread_id": "t"}},
        context={"user_id": "mei"},
    )
    [selection] = log.get_episode(out["memabra_episode_id"]).selections
    assert len(selection.chosen_ids) == 1  # the two do not fit the budget together


def test_an_answer_asking_back_in_chinese_is_no_useful_reuse() -> None:
    from factories import uniform_selection
    from memabra._records import Candidate, CandidateKind
    from memabra._usage import detect_usage

    dog = Candidate("m-dog", CandidateKind.MEMORY, "我的狗叫旺财", 6)
    selection = uniform_selection("mei", [dog], ["m-dog"], query="我的狗叫什么名字？")
    told = detect_usage(selection, (), "我的狗叫什么名字？", "你的狗叫旺财。", {})
    asked = detect_usage(selection, (), "我的狗叫什么名字？", "你是说旺财吗？", {})
    assert told.used == told.useful == {"m-dog"}
    assert asked.used == {"m-dog"} and not asked.useful


def test_asking_the_same_question_again_in_chinese_is_a_repeat() -> None:
    from memabra._corrections import detect_correction

    signals = detect_correction("我的狗叫什么名字？", "我的狗到底叫什么名字？")
    assert [s.kind for s in signals] == ["repeat"]
    assert detect_correction("我的狗叫什么名字？", "我住在哪里？") == []


def test_an_upgrade_recounts_chinese_memories_stored_by_the_word_and_leaves_english_alone(engine) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    from sqlalchemy import text

    from memabra.storage import downgrade, upgrade

    upgrade(engine, "0015")
    now = datetime.now(UTC)
    rows = [
        ("mei", "m-zh", "我的狗叫旺财，它喜欢在公园里追球", 1),  # as the old rule counted it
        ("ann", "m-en", "My dog is called Rex", 7),  # a count English text never had: kept as stored
        ("", "tool-zh", "查询天气", 1),  # a tool's count is its registration's, refreshed at start
    ]
    with engine.begin() as c:
        for owner, item_id, body, tokens in rows:
            c.execute(
                text(
                    "INSERT INTO registry (kind, owner, id, name, text, tokens, source, metadata, created_at, "
                    "updated_at, times_chosen, times_used) VALUES (:k, :o, :i, :i, :t, :n, 'user', '{}', :at, :at, 0, 0)"
                ),
                {"k": "tool" if owner == "" else "memory", "o": owner, "i": item_id, "t": body, "n": tokens, "at": now},
            )
    upgrade(engine)
    with engine.connect() as c:
        counts = {row[0]: row[1] for row in c.execute(text("SELECT id, tokens FROM registry"))}
    assert counts == {"m-zh": approx_tokens(rows[0][2]), "m-en": 7, "tool-zh": 1}
    assert counts["m-zh"] == 16  # 15 characters and a comma
    downgrade(engine, "0015")  # leaves the counts
    with engine.connect() as c:
        assert c.execute(text("SELECT tokens FROM registry WHERE id = 'm-zh'")).scalar_one() == 16


def test_a_store_memory_written_before_cjk_counting_is_read_at_its_real_cost() -> None:
    from memabra._store_items import stored_tokens

    assert stored_tokens(1, "我的狗叫旺财，它喜欢在公园里追球") == 16
    assert stored_tokens(7, "My dog is called Rex") == 7
    assert stored_tokens(None, "My dog is called Rex") == approx_tokens("My dog is called Rex")


def test_find_tools_ranks_a_tool_described_in_japanese_by_the_question() -> None:
    from memabra._recall import rank
    from memabra._records import CandidateKind, RegistryItem

    described = {
        "get_weather": "指定した都市の天気予報を取得します",
        "book_train": "新幹線の座席を予約します",
        "convert_currency": "通貨を両替レートで換算します",
    }
    tools = [RegistryItem(CandidateKind.TOOL, name, "", text, 20, name=name) for name, text in described.items()]
    assert [item.name for item, _ in rank(tools, "明日の東京の天気は？", None)][0] == "get_weather"
    assert [item.name for item, _ in rank(tools, "新幹線を予約したい", None)][0] == "book_train"


def test_a_chinese_fact_the_model_extracts_is_kept_in_chinese_and_recalled_by_a_later_question(memory_log) -> None:  # type: ignore[no-untyped-def]
    from langchain_core.messages import BaseMessage, SystemMessage

    from memabra._llm_facts import LLMFactExtractor

    memory, log = memory_log
    for other in OTHERS["zh"]:
        memory.remember("mei", other)

    def reply(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
        first = messages[0]
        if isinstance(first, SystemMessage) and first.content == LLMFactExtractor.PROMPT:
            assert "language of the message" in str(first.content)
            said = str(messages[-1].content)
            return AIMessage('["我的狗叫旺财"]' if "旺财" in said else "[]")
        return AIMessage("你的狗叫旺财。" if "旺财" in str(first.content) else "好的。")

    model = ScriptedChatModel(replies=[reply])
    agent = create_memabra_agent(
        model,
        memory=memory,
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=300),
        extract_with_model=True,
    )

    def ask(text: str, thread: str) -> dict:  # type: ignore[type-arg]
        return agent.invoke(
            {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context={"user_id": "mei"}
        )

    ask("对了，我的狗叫旺财。", "t1")
    [dog] = [item for item in memory.items("mei") if "旺财" in item.text]
    assert dog.text == "我的狗叫旺财"
    out = ask("我的狗叫什么名字？", "t2")
    episode = log.get_episode(out["memabra_episode_id"])
    assert episode.selections[0].chosen_ids[0] == dog.id
    assert episode.used_ids is not None and dog.id in episode.used_ids


def test_searches_find_text_in_another_case_in_any_script(memory_log) -> None:  # type: ignore[no-untyped-def]
    from memabra.storage import AdminMemories, EpisodeFilter

    memory, log = memory_log
    from memabra import SQLMemory

    if not isinstance(memory, SQLMemory):  # a LangGraph store's memories are not in the log's registry
        pytest.skip("the admin's memory search reads the SQL registry")
    memory.remember("max", "Ich wohne in MÜNCHEN")
    memory.remember("max", "Я живу в Москве")
    page = AdminMemories(log).memories("max", search="münchen")
    assert [m.text for m in page.items] == ["Ich wohne in MÜNCHEN"]
    assert [m.text for m in AdminMemories(log).memories("max", search="москве").items] == ["Я живу в Москве"]
    model = ScriptedChatModel(replies=[AIMessage("Hallo.")])
    agent = create_memabra_agent(model, memory=memory, db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    agent.invoke(
        {"messages": [HumanMessage("Wie ist das Wetter in MÜNCHEN?")]},
        {"configurable": {"thread_id": "t"}},
        context={"user_id": "max"},
    )
    found = log.list_episodes(EpisodeFilter(query_contains="münchen"), limit=5).items
    assert [e.query for e in found] == ["Wie ist das Wetter in MÜNCHEN?"]


def test_half_width_katakana_cost_what_full_width_does() -> None:
    assert approx_tokens("ｶﾞｲﾄﾞを読む") == approx_tokens("ガイドを読む") == 6
