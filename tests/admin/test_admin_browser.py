"""The admin view in real headless Chromium (Debian's ``chromium``, driven by Playwright).

The app runs under uvicorn in a background thread on a free loopback port. Screenshots go to
``$MEMABRA_TEST_ARTIFACTS`` (default: ``artifacts/`` at the repository root, git-ignored). Without chromium these tests skip,
except in CI (``$CI`` set), where a missing browser is a failure.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from factories import episode
from memabra import (
    Selection,
)
from memabra._feedback import RewardService
from memabra.storage import EpisodeFilter, EpisodeLog

from .conftest import (
    TOKEN,
    XSS_ANSWER,
    XSS_MEMORY,
    XSS_QUERY,
    XSS_TOOL_RESULT,
    Seeded,
    explained_episode,
    learned_episode,
    migrated_database,
    record_ope,
    seed_log,
)

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium")
if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip(
        "Debian's chromium is not installed (apt-get install chromium); CI installs it", allow_module_level=True
    )

# In CI a missing package fails the run like a missing browser does; elsewhere it skips.
_load = importlib.import_module if os.environ.get("CI") else pytest.importorskip
uvicorn = _load("uvicorn")
sync_api = _load("playwright.sync_api")


def greedy_by_score(selection: Selection) -> tuple[str, ...]:
    """A stand-in current policy: the best-scored candidate of each kind offered."""
    best: dict[str, Any] = {}
    for sc in selection.offered:
        if sc.candidate.kind not in best or sc.score > best[sc.candidate.kind].score:
            best[sc.candidate.kind] = sc
    return tuple(sc.candidate.id for sc in best.values())


class _Server:
    def __init__(self, app: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> _Server:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the admin server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
        self._socket.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, EpisodeLog, Seeded]]:
    from memabra._admin import create_app

    with migrated_database("sqlite", tmp_path_factory.mktemp("browser")) as url, EpisodeLog(url) as log:
        seeded = seed_log(log)
        record_ope(log)
        app = create_app(log, token=TOKEN, current_policy=greedy_by_score)
        with _Server(app) as server:
            yield server.url, log, seeded


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.fail("CI is set but Debian's chromium is not installed; .ci/run installs it")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield instance
        instance.close()


@pytest.fixture
def artifacts() -> Path:
    # artifacts/ at the repository root is git-ignored; CI keeps it as the run's screenshots.
    directory = Path(os.environ.get("MEMABRA_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class _Watch:
    """Records what must never happen on these pages: dialogs (an injected alert) and errors."""

    def __init__(self, page: Any, *, dialogs: bool = True) -> None:
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        if dialogs:
            page.on("dialog", self._dialog)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def page(browser: Any, served: tuple[str, EpisodeLog, Seeded]) -> Iterator[Any]:
    context = browser.new_context(base_url=served[0], viewport={"width": 1440, "height": 1000})
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    yield tab
    context.close()


def sign_in(page: Any) -> None:
    page.goto("/episodes")
    assert "/login" in page.url
    page.fill("#secret", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url("**/episodes")


def test_sign_in_filter_open_a_decision_and_record_a_correction(
    page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    _, log, seeded = served
    page.goto("/episodes")
    page.fill("#secret", "wrong-token-for-sure")
    page.click("button[type=submit]")
    assert page.locator(".alert-error").inner_text() == "Wrong token or password."
    page.screenshot(path=str(artifacts / "admin-sign-in.png"))
    watch = _Watch(page)  # from here on, nothing may fail to load and no dialog may open
    page.fill("#secret", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url("**/episodes")
    assert page.locator("#episode-table tbody tr").count() == len(seeded.episodes)

    page.fill("input[name=user]", "bob")
    page.select_option("select[name=kind]", "tool")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**/episodes?*user=bob*")
    rows = page.locator("#episode-table tbody tr")
    expected = [e for i, e in enumerate(seeded.episodes[:-1]) if i % 3 == 1 and i % 2 == 0]
    assert rows.count() == len(expected)
    assert set(rows.locator("td:nth-child(2)").all_inner_texts()) == {"bob"}
    page.screenshot(path=str(artifacts / "admin-episodes-filtered.png"), full_page=True)

    target = seeded.episodes[16]  # bob, recent, not final, not corrected
    page.click(f"a[href^='/episodes/{target}?list='] >> nth=0")  # the link carries the list back
    page.wait_for_url(f"**/episodes/{target}?list=*")
    decision = page.locator("article.decision").first
    candidates = decision.locator("table.candidates > tbody > tr")  # open without a click
    assert candidates.first.is_visible()
    assert candidates.count() == 6
    assert decision.locator("tr.chosen").count() == 2
    assert "would add" in decision.locator(".counterfactual").inner_text()
    decision.screenshot(path=str(artifacts / "admin-decision.png"))

    page.fill("#correction", "I live in Paris now")
    page.click("#correction-form button[type=submit]")
    page.wait_for_url(f"**/episodes/{target}?notice=feedback-stored*")
    assert page.locator("#corrected-badge").is_visible()
    assert "I live in Paris now" in page.locator("#feedback").inner_text()
    assert log.get_reward(target).components.c == 1.0  # type: ignore[union-attr]
    page.screenshot(path=str(artifacts / "admin-episode-corrected.png"), full_page=True)

    page.goto("/episodes?corrected=yes")
    listed = page.locator("#episode-table tbody td:first-child a").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))"
    )
    assert f"/episodes/{target}?list=corrected%3Dyes" in listed
    assert watch.dialogs == [] and watch.errors == []


def test_markup_in_user_text_is_shown_and_never_runs(
    page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    _, _, seeded = served
    watch = _Watch(page)
    sign_in(page)
    page.goto(f"/episodes/{seeded.xss}")
    for text in (XSS_MEMORY, XSS_QUERY, XSS_ANSWER, XSS_TOOL_RESULT):
        assert page.get_by_text(text, exact=False).first.is_visible(), text
    assert page.locator("main script").count() == 0
    assert page.locator("main b, main img, main svg, main i").count() == 0
    page.screenshot(path=str(artifacts / "admin-episode-escaped.png"), full_page=True)
    assert watch.dialogs == []
    assert watch.errors == []


def test_policy_charts_render_with_data(page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path) -> None:
    watch = _Watch(page, dialogs=False)
    sign_in(page)
    page.goto("/policies?window=all")
    for canvas_id in ("chart-reward", "chart-kinds", "chart-exploration", "chart-ope"):
        canvas = page.locator(f"#{canvas_id}")
        canvas.wait_for()
        stats = canvas.evaluate(
            """c => {
                const ctx = c.getContext('2d');
                const px = ctx.getImageData(0, 0, c.width, c.height).data;
                let painted = 0;
                for (let i = 3; i < px.length; i += 4) { if (px[i] > 0) painted++; }
                const points = c.chart ? c.chart.data.datasets.reduce((n, d) => n + d.data.filter(v => v !== null).length, 0) : 0;
                return {painted, points, width: c.width, height: c.height};
            }"""
        )
        assert stats["width"] > 100 and stats["height"] > 100, canvas_id
        assert stats["points"] > 0, canvas_id
        assert stats["painted"] > 0.01 * stats["width"] * stats["height"], (canvas_id, stats)
    assert "[0.4400, 0.6000]" in page.locator("#ope").inner_text()
    page.screenshot(path=str(artifacts / "admin-policies.png"), full_page=True)

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-version='test-v3'] button", has_text="Promote").click()
    page.wait_for_url("**/policies?notice=promoted")
    assert "active" in page.locator("tr[data-version='test-v3']").inner_text()
    assert watch.errors == []


def test_the_decision_view_reads_without_a_click(
    page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    _, log, _ = served
    episode = explained_episode()
    RewardService(log).record(episode)
    watch = _Watch(page)
    sign_in(page)
    page.goto(f"/episodes/{episode.id}")
    decision = page.locator("article.decision").first
    table = decision.locator("table.decision-view")
    assert table.is_visible()  # not collapsed
    headers = table.locator("thead th").all_inner_texts()
    for name in ("Candidate", "Score", "Prior", "Learner", "Probability", "Chosen", "Why not chosen"):
        assert name.upper() in [h.upper() for h in headers], headers

    def row(cid: str) -> str:
        return str(table.locator(f"tr[data-candidate='{cid}']").inner_text())

    assert "Ann likes green tea" in row("m-tea") and "chosen · slot 0" in row("m-tea")
    assert "the weather forecast for a city" in row("t-weather") and "+0.500" in row("t-weather")
    assert "over the token budget" in row("m-history")
    assert "exploration: slot 0 drew “Ann likes green tea”" in row("m-lyon")
    assert "stop: the router stopped at slot 1" in row("m-chess")
    assert "slots full" in row("t-search") and "-0.600" in row("t-search") and "1.900" in row("t-search")
    counterfactual = decision.locator(".counterfactual").inner_text()
    assert "Ann lives in Lyon" in counterfactual and "exploration" in counterfactual  # texts, with the reason
    slots = decision.locator("table.slots").inner_text()
    assert "Ann likes green tea" in slots and "stop" in slots
    decision.screenshot(path=str(artifacts / "admin-decision-view.png"))
    assert (artifacts / "admin-decision-view.png").stat().st_size > 10_000
    assert watch.dialogs == [] and watch.errors == []


def test_a_learned_routers_decision_shows_what_the_learner_added(
    page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    _, log, _ = served
    episode = learned_episode()  # a real LinearRouter's decision, after it learned
    RewardService(log).record(episode)
    watch = _Watch(page)
    sign_in(page)
    page.goto(f"/episodes/{episode.id}")
    decision = page.locator("article.decision").first
    table = decision.locator("table.decision-view")
    headers = [h.upper() for h in table.locator("thead th").all_inner_texts()]
    learner_column = headers.index("LEARNER") + 1
    parts = []
    for sc in episode.selections[0].offered:
        cell = table.locator(f"tr[data-candidate='{sc.candidate.id}'] > td:nth-child({learner_column})")
        parts.append(float(cell.inner_text().replace("−", "-")))
        assert abs(parts[-1] - (sc.score - sc.features["hyb_z"])) < 1e-3
    assert max(abs(p) for p in parts) > 0.1  # the learner part is shown, and is not 0
    chosen = table.locator("tr.chosen")
    assert chosen.count() == 1 and "ann likes green tea" in chosen.inner_text()
    decision.screenshot(path=str(artifacts / "admin-decision-view-learned.png"))
    assert (artifacts / "admin-decision-view-learned.png").stat().st_size > 10_000
    assert watch.dialogs == [] and watch.errors == []


def test_memories_list_search_and_retire(page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path) -> None:
    from memabra import MemoryStatus, SQLMemory

    _, log, _ = served
    memory = SQLMemory(log)
    kept = memory.remember("dora", "I drink rooibos in the evening")
    doomed = memory.remember("dora", "My bike is red")
    watch = _Watch(page, dialogs=False)
    sign_in(page)
    page.click("nav.nav a[href='/memories']")
    page.wait_for_url("**/memories")
    page.click("#memory-users a[href='/memories?user=dora']")
    page.wait_for_url("**/memories?user=dora")
    rows = page.locator("#memory-table tbody tr")
    assert rows.count() == 2
    assert "never used" in rows.first.inner_text()
    page.fill("input[name=q]", "bike")
    page.click("#memory-filters button[type=submit]")
    page.wait_for_url("**/memories?*q=bike*")
    assert page.locator("#memory-table tbody tr").count() == 1
    page.screenshot(path=str(artifacts / "admin-memories.png"), full_page=True)
    page.click("#memory-table tbody tr a.cand-text")
    page.wait_for_url("**/memories/item?*")
    assert page.locator("#memory-text").inner_text() == "My bike is red"
    confirmations: list[str] = []

    def accept(dialog: Any) -> None:
        confirmations.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click("#memory-retire-form button[type=submit]")
    page.wait_for_url("**/memories/item?*notice=memory-retired*")
    assert confirmations and "Retire this memory" in confirmations[0]
    assert page.locator("#memory-status").inner_text() == "retired"
    assert "retired in the admin (operator token sign-in)" in page.locator("#memory-history").inner_text()
    assert memory.get("dora", doomed.id).status is MemoryStatus.RETIRED
    assert memory.get("dora", kept.id).status is MemoryStatus.ACTIVE
    page.screenshot(path=str(artifacts / "admin-memory-retired.png"), full_page=True)
    assert watch.errors == []


def test_the_ope_chart_marks_untrusted_and_recommended_estimates(
    page: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    from memabra._records import OPEResult

    _, log, _ = served
    verdict = {"supported": False, "reason": "the log does not cover this target", "unreached_share": 0.99}
    other = {**verdict, "logging_value": 0.88, "recommended": False, "estimator_supported": True}
    log.record_ope_results(
        [
            OPEResult(
                "uncovered",
                "cdr",
                1.7,
                -1.9,
                1.6,
                190,
                run_id="uncovered-run",
                details={**verdict, "logging_value": 0.88, "recommended": True},
            ),
            OPEResult("uncovered", "dm", 0.93, 0.87, 0.98, 190, run_id="uncovered-run", details=other),
            # a pseudo-inverse estimate far outside what the reward can be
            OPEResult("uncovered", "pi", 9.0, 0.2, 18.0, 190, run_id="uncovered-run", details=other),
        ]
    )
    watch = _Watch(page, dialogs=False)
    sign_in(page)
    page.goto("/policies?window=all")
    canvas = page.locator("#chart-ope")
    canvas.wait_for()
    datasets = canvas.evaluate(
        "c => c.chart.data.datasets.map(d => ({label: d.label, points: d.data.filter(v => v !== null).length}))"
    )
    by_label = {d["label"]: d["points"] for d in datasets}
    assert by_label["recommended, unsupported"] >= 1 and by_label["estimate not to be trusted"] >= 1
    assert by_label["logging policy"] >= 2
    # the legend draws each dataset's own marker: a recommended star is not an untrusted cross
    legend = canvas.evaluate("c => c.chart.legend.legendItems.map(i => [i.text, i.pointStyle])")
    markers = dict(legend)
    assert markers["recommended"] == markers["recommended, unsupported"] == "star"
    assert markers["estimate not to be trusted"] == "crossRot"
    assert canvas.evaluate("c => c.chart.legend.options.labels.usePointStyle") is True
    # one wild estimate does not stretch the axis past the reward's range; it is marked instead
    scale = canvas.evaluate("c => [c.chart.scales.y.min, c.chart.scales.y.max]")
    assert scale[0] > -2.1 and scale[1] < 1.8
    assert by_label["interval runs past the axis"] >= 1
    # every estimate keeps its label
    ticks = canvas.evaluate("c => [c.chart.scales.x.ticks.length, c.chart.data.labels.length]")
    assert ticks[0] == ticks[1]
    run = page.locator("#ope tbody.ope-run[data-run='uncovered-run']")
    muted = run.locator("tr.ope-muted").first
    assert not muted.is_visible()  # folded under its run
    run.locator("details.ope-estimates > summary").click()
    assert muted.is_visible() and "target unsupported" in muted.inner_text()
    page.locator("#chart-ope").screenshot(path=str(artifacts / "admin-ope-chart.png"))
    assert watch.errors == []


def test_the_snapshot_actions_fit_a_1280_px_screen(
    browser: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    from memabra import PolicySnapshot

    url, log, _ = served
    reason = "mean joint weight 0.181 [0.109, 0.252] excludes 1: the log does not cover this target " * 3
    metrics = {"verdict": f"forced: unsupported: {reason}", "estimator": "cdr", "supported": False}
    metrics |= {"estimate": 1.1891, "ci_low": -1.9, "ci_high": 1.6, "logging_value": 1.256}
    log.save_snapshot(PolicySnapshot("test", "linear-71c5380081+446", b"\x05" * 512, parent="test-v2", metrics=metrics))
    context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        sign_in(page)
        page.goto("/policies?window=all")
        card = page.locator("#snapshots")
        widths = card.locator(".table-scroll").evaluate("c => [c.scrollWidth, c.clientWidth]")
        assert widths[0] <= widths[1], "the snapshots table scrolls sideways"
        row = card.locator("tr[data-version='linear-71c5380081+446']")
        promote = row.locator("button", has_text="Promote")
        box = promote.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280
        assert "forced" in row.inner_text() and "unsupported" in row.inner_text()
        card.screenshot(path=str(artifacts / "admin-snapshots-1280.png"))
        asked: list[str] = []

        def dismiss(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.dismiss()

        page.once("dialog", dismiss)
        promote.click()
        assert asked and "UNSUPPORTED" in asked[0] and "FORCED" in asked[0] and "1.256" in asked[0]
        assert log.get_snapshot("linear-71c5380081+446").status == "candidate"  # dismissed: not promoted
        ope = page.locator("#ope > .table-scroll").evaluate("c => [c.scrollWidth, c.clientWidth]")
        assert ope[0] <= ope[1], "the offline-evaluation table scrolls sideways"
    finally:
        context.close()


def test_deleting_an_episode_asks_first(page: Any, served: tuple[str, EpisodeLog, Seeded]) -> None:
    from memabra import UnknownEpisodeError

    _, log, _ = served
    episode = explained_episode()
    RewardService(log).record(episode)
    sign_in(page)
    page.goto(f"/episodes/{episode.id}")
    asked: list[str] = []

    def answer(dialog: Any, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, accept=False))
    page.click("#delete-episode button[type=submit]")
    assert asked and "cannot be undone" in asked[0]
    assert log.get_episode(episode.id).id == episode.id  # dismissed: nothing deleted
    page.once("dialog", lambda dialog: answer(dialog, accept=True))
    page.click("#delete-episode button[type=submit]")
    page.wait_for_url("**/episodes?notice=episode-deleted")
    assert "Episode deleted" in page.locator(".alert-ok").inner_text()
    with pytest.raises(UnknownEpisodeError):
        log.get_episode(episode.id)


def test_erasing_a_user_asks_first_and_lands_on_the_deletion_history(
    page: Any, served: tuple[str, EpisodeLog, Seeded]
) -> None:
    from memabra import SQLMemory

    _, log, _ = served
    log.log_episodes([episode("zoe") for _ in range(2)])
    SQLMemory(log).remember("zoe", "I live in Quito")
    sign_in(page)
    page.goto("/memories?user=zoe")
    page.fill("#erase-user-form input[name=confirm]", "zoe")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#erase-user-form button[type=submit]")
    assert log.list_episodes(EpisodeFilter(user_id="zoe")).items  # dismissed: nothing erased
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#erase-user-form button[type=submit]")
    page.wait_for_url("**/deletions?notice=user-erased&user=zoe")
    assert "user zoe: episodes and memories (erasure)" in page.locator("#deletion-table").inner_text()
    assert not log.list_episodes(EpisodeFilter(user_id="zoe")).items and SQLMemory(log).list("zoe") == []


def test_a_phone_never_scrolls_the_page_sideways(
    browser: Any, served: tuple[str, EpisodeLog, Seeded], artifacts: Path
) -> None:
    """At 390 px the bar wraps with every link inside it, a wide table scrolls inside its card and
    a chart is as wide as its card: only the table moves sideways, never the page."""
    url, log, seeded = served
    episode = explained_episode()
    RewardService(log).record(episode)
    context = browser.new_context(base_url=url, viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        watch = _Watch(page)
        sign_in(page)
        for path in ("/episodes", "/policies?window=all", f"/episodes/{episode.id}", "/memories", "/deletions"):
            page.goto(path)
            page.wait_for_load_state("load")
            assert page.evaluate("document.documentElement.scrollWidth") <= 391, path
            bar = page.locator("header.topbar").bounding_box()
            assert bar is not None and bar["x"] >= 0 and bar["x"] + bar["width"] <= 391, path
            for item in page.locator("header.topbar nav.nav a, header.topbar button").all():
                box = item.bounding_box()
                assert box is not None, path
                inside_x = bar["x"] <= box["x"] and box["x"] + box["width"] <= bar["x"] + bar["width"]
                inside_y = bar["y"] <= box["y"] and box["y"] + box["height"] <= bar["y"] + bar["height"]
                assert inside_x and inside_y, (path, item.inner_text(), box, bar)
            name = path.strip("/").split("?")[0].replace("/", "-")[:20]
            page.screenshot(path=str(artifacts / f"admin-phone-{name}.png"), full_page=True)
        # the episode page: the candidate table scrolls inside its card, every column reachable
        page.goto(f"/episodes/{episode.id}")
        scroller = page.locator("article.decision .table-scroll").first
        widths = scroller.evaluate("c => [c.scrollWidth, c.clientWidth]")
        assert widths[0] > widths[1]  # wider than the phone: it scrolls, inside the card
        scroller.evaluate("c => { c.scrollLeft = c.scrollWidth; }")
        features = scroller.locator("thead th").last
        box, frame = features.bounding_box(), scroller.bounding_box()
        assert box is not None and frame is not None and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1
        # the charts fit their cards
        page.goto("/policies?window=all")
        for canvas_id in ("chart-reward", "chart-kinds", "chart-exploration", "chart-ope"):
            canvas = page.locator(f"#{canvas_id}")
            card = page.locator(f"section.chart-card:has(#{canvas_id})")
            c, k = canvas.bounding_box(), card.bounding_box()
            assert c is not None and k is not None and c["width"] > 200, canvas_id
            assert k["x"] <= c["x"] and c["x"] + c["width"] <= k["x"] + k["width"], canvas_id
            assert k["x"] + k["width"] <= 391, canvas_id
        assert watch.dialogs == [] and watch.errors == []
    finally:
        context.close()


def test_at_320_px_without_javascript_every_page_reads_and_a_delete_asks_first(
    browser: Any, served: tuple[str, EpisodeLog, Seeded]
) -> None:
    """The narrowest width WCAG reflows to (320 px), with scripts blocked by policy: no page
    scrolls sideways, the charts' numbers are there as a table, and Delete episode, one click with
    no script to ask, deletes nothing until a page has asked."""
    from memabra import SQLMemory

    url, log, _ = served
    episode = explained_episode()
    RewardService(log).record(episode)
    memory = SQLMemory(log).remember("ann", "I keep bees")
    context = browser.new_context(base_url=url, viewport={"width": 320, "height": 640}, java_script_enabled=False)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        sign_in(page)
        paths = ["/login", "/episodes", f"/episodes/{episode.id}", "/memories", "/memories?user=ann"]
        paths += [f"/memories/item?user=ann&id={memory.id}", "/policies?window=all", "/deletions", "/turns"]
        for path in paths:
            page.goto(path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 321, (path, width)
        page.goto("/policies?window=all")
        page.click("#chart-reward-table summary")
        assert page.locator("#chart-reward-table tbody tr").count() >= 1
        page.goto(f"/episodes/{episode.id}")
        page.click("#delete-episode button[type=submit]")
        assert page.locator("h1").inner_text() == "Delete episode?"
        assert log.get_episode(episode.id).id == episode.id  # asked, nothing deleted
        assert page.evaluate("document.documentElement.scrollWidth") <= 321
        page.click("#confirm-cancel")
        page.wait_for_url(f"**/episodes/{episode.id}")
    finally:
        context.close()
