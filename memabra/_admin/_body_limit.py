"""A bound on a request's body, enforced before any route reads it: the sign-in form is parsed
before anyone is signed in, and Starlette bounds each form field (1 MB) and their number (1,000),
not the body, so a client could make the server read and hold a body of any size."""

from __future__ import annotations

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_BODY_BYTES", "BodyLimit"]

MAX_BODY_BYTES = 512 * 1024
"""The largest body the admin reads. Its largest form holds two texts of up to 10,000 characters
(a correction and a comment): at 4 bytes a character, percent-encoded 3 characters a byte, 240 KB."""


class _TooLarge(Exception):
    """Raised from ``receive`` once a body without a declared length grows past the bound."""


class BodyLimit:
    """413 for a body longer than :data:`MAX_BODY_BYTES`: at once where ``Content-Length`` says
    so, else as soon as the bytes read pass it (a chunked body declares no length)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await _refuse(scope, receive, send)
            return
        read = 0
        started = False

        async def bounded_receive() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > MAX_BODY_BYTES:
                    raise _TooLarge
            return message

        async def noting_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, noting_send)
        except _TooLarge:
            if started:  # nothing more can be said: the response is under way
                raise
            await _refuse(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
    response = PlainTextResponse(
        f"Request body too large: the admin reads at most {MAX_BODY_BYTES // 1024} KiB", status_code=413
    )
    await response(scope, receive, send)
