"""What a screen reader reads in a decision's candidate table: every column has a header, and the
marks (✓ chosen, ! scored above a chosen one, ✓ the active policy would choose it now) say so in
words, not only in a tooltip."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from memabra import Selection

from .conftest import ClientFactory, Seeded


def _greedy(selection: Selection) -> tuple[str, ...]:
    return tuple(sc.candidate.id for sc in selection.offered[:1])


def test_the_candidate_table_names_its_marks_in_words(make_client: ClientFactory, seeded: Seeded) -> None:
    policy: Callable[[Selection], Any] = _greedy
    page = make_client(current_policy=policy).get(f"/episodes/{seeded.episodes[1]}").text
    table = page.split('class="table decision-view candidates"', 1)[1].split("</table>", 1)[0]
    headers = re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", table.split("</thead>", 1)[0], re.S)
    assert all(re.sub(r"<[^>]+>", "", h).strip() for h in headers), headers
    marks = re.findall(r"<span[^>]*>[✓!]</span>|<td>✓</td>", table)
    assert marks and all("aria-label=" in m for m in marks), marks


def test_every_page_lets_the_keyboard_skip_to_its_content(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client()
    for url in ("/episodes", "/policies", "/memories", "/deletions", "/turns", f"/episodes/{seeded.episodes[0]}"):
        page = client.get(url).text
        body = page.split("<body>", 1)[1]
        assert body.lstrip().startswith('<a class="skip-link" href="#main">Skip to content</a>'), url
        assert '<main id="main" tabindex="-1"' in page, url
