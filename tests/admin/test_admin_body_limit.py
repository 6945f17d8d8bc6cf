"""The admin reads no request body over its bound: the sign-in form is parsed before anyone is
signed in, and Starlette bounds a form's fields, not its body."""

from __future__ import annotations

from collections.abc import Iterator

from starlette.testclient import TestClient

from memabra._admin import create_app
from memabra._admin._body_limit import MAX_BODY_BYTES
from memabra.storage import EpisodeLog

from .conftest import TOKEN, Seeded, csrf_of, sign_in

_FORM = {"content-type": "application/x-www-form-urlencoded"}


def test_a_body_declared_over_the_bound_is_refused_before_it_is_read(log: EpisodeLog, seeded: Seeded) -> None:
    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
        too_big = client.post("/login", content=b"secret=" + b"x" * MAX_BODY_BYTES, headers=_FORM)
        assert too_big.status_code == 413 and "too large" in too_big.text
        assert too_big.headers["x-frame-options"] == "DENY"  # the security headers still come
        assert sign_in(client).status_code == 303  # and the server serves on


def test_a_body_with_no_declared_length_is_cut_off_once_it_passes_the_bound(log: EpisodeLog, seeded: Seeded) -> None:
    def chunks() -> Iterator[bytes]:  # a chunked body: no Content-Length to check up front
        yield b"secret="
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536

    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
        too_big = client.post("/login", content=chunks(), headers=_FORM)
        assert too_big.status_code == 413


def test_the_largest_form_the_admin_takes_fits(log: EpisodeLog, seeded: Seeded) -> None:
    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
        page = client.get("/login")
        # a secret of 10,000 four-byte characters, percent-encoded: 120,000 bytes, refused as a
        # wrong secret (401), not as a body too large
        wrong = client.post("/login", data={"secret": "😀" * 10_000, "csrf_token": csrf_of(page.text)})
        assert wrong.status_code != 413
