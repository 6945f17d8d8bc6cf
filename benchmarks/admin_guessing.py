"""Admin view: what 400 wrong sign-ins and 400 wrong bearer tokens from one client meet.

    python benchmarks/admin_guessing.py [--attempts 400]

Serves the admin app in-process (Starlette's TestClient; no network) over a fresh SQLite log and
sends wrong secrets as fast as it answers, first through the sign-in form, then as
``Authorization: Bearer`` headers (a fresh app each, so each starts unthrottled). Prints, per
kind, how many were answered 401 (checked) and 429 (locked out, not checked), the seconds it
took, the attempts per second, and the warnings logged. Then signs out and replays the old
cookie, which must be refused.
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from memabra import create_admin_app
from memabra.storage import EpisodeLog, upgrade

TOKEN = "benchmark-admin-token-0123"


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match
    return match.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'admin.db'}"
        upgrade(url)
        with EpisodeLog(url) as log:
            counter = _Count()
            logging.getLogger("memabra").addHandler(counter)
            for kind in ("sign-in form", "bearer token"):
                counter.n = 0
                statuses: dict[int, int] = {}
                with TestClient(create_admin_app(log, token=TOKEN), follow_redirects=False) as client:
                    csrf = _csrf(client.get("/login").text)
                    started = time.perf_counter()
                    for i in range(args.attempts):
                        if kind == "sign-in form":
                            r = client.post("/login", data={"secret": f"wrong-guess-{i:05d}", "csrf_token": csrf})
                        else:
                            r = client.get("/episodes", headers={"authorization": f"Bearer wrong-guess-{i:05d}"})
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    elapsed = time.perf_counter() - started
                print(
                    f"{kind}: {args.attempts} wrong secrets in {elapsed:.1f} s ({args.attempts / elapsed:.0f}/s): "
                    f"{statuses.get(401, 0)} checked (401), {statuses.get(429, 0)} locked out (429), "
                    f"{counter.n} warnings logged"
                )
            with TestClient(create_admin_app(log, token=TOKEN), follow_redirects=False) as client:
                client.post("/login", data={"secret": TOKEN, "csrf_token": _csrf(client.get("/login").text)})
                cookie = client.cookies.get("memabra_admin")
                client.post("/logout", data={"csrf_token": _csrf(client.get("/episodes").text)})
                client.cookies.set("memabra_admin", cookie or "")
                replay = client.get("/episodes")
                print(f"old cookie after sign-out: HTTP {replay.status_code} -> {replay.headers.get('location')}")


if __name__ == "__main__":
    main()
