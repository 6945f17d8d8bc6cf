"""Signing in and out of the admin view: ``GET``/``POST /login`` (a token or password, throttled
per client: a locked-out client is refused before its secret is looked at) and ``POST /logout``
(the session is revoked server-side, so a copied cookie stops working too)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memabra._admin._auth import SessionState, WebSession
from memabra._admin._plumbing import _NOTICES, _AdminBase, _Auth, _client, _HttpError, _locked_out, _safe_next

__all__ = ["LoginPages"]


class LoginPages(_AdminBase):
    """``/login`` and ``/logout``."""

    async def login_form(self, request: Request) -> Response:
        state, session = await self._read_session(request)
        if session is not None and session.authenticated:
            return RedirectResponse(_safe_next(request.query_params.get("next")), status_code=303)
        return self._login_page(
            request,
            request.query_params.get("next", ""),
            message="Your session expired; sign in again." if request.query_params.get("expired") else "",
            notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
            session=session if state is SessionState.VALID else None,
        )

    def _login_page(
        self,
        request: Request,
        next_url: str,
        *,
        message: str = "",
        notice: str = "",
        status: int = 200,
        session: WebSession | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        cookie = None
        if session is None:
            cookie, session = self.codec.issue(authenticated=False)
        response = self._render(
            "login.html",
            status,
            auth=_Auth(SessionState.VALID, session, bearer=False),
            headers=headers,
            next_url=_safe_next(next_url),
            message=message,
            notice=notice,
        )
        if cookie is not None:
            self._set_session(request, response, cookie)
        return response

    async def login(self, request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        next_url = form.get("next", "")
        _, session = await self._read_session(request)
        if session is None or not session.csrf_matches(form.get("csrf_token")):
            return self._login_page(
                request, next_url, message="The sign-in form expired or came from elsewhere; try again.", status=403
            )
        client = _client(request)
        locked = self.throttle.locked_for(client)
        if locked > 0:
            # Refused without looking at the secret: a locked-out client learns nothing by guessing.
            exc = _locked_out(locked)
            return self._login_page(
                request, next_url, message=exc.message, status=exc.status, session=session, headers=exc.headers
            )
        who = self.credentials.principal_of(form.get("secret", ""))
        if who is None:
            await asyncio.sleep(self.throttle.failed(client, "sign-in"))
            return self._login_page(request, next_url, message="Wrong token or password.", status=401, session=session)
        self.throttle.succeeded(client)
        cookie, _ = self.codec.issue(authenticated=True, principal=who.credential, role=who.role)
        response = RedirectResponse(_safe_next(next_url), status_code=303)
        self._set_session(request, response, cookie)
        return response

    async def logout(self, request: Request) -> Response:
        _, session = await self._read_session(request)
        form = await request.form()
        token = form.get("csrf_token")
        if session is None or not session.csrf_matches(token if isinstance(token, str) else None):
            return self._error(_HttpError(403, "Forbidden", "The form's CSRF token is missing or wrong."))
        # Revoked server-side, so a copy of the cookie (another tab, a stolen one) stops working too.
        await run_in_threadpool(self.revocations.revoke, session.id, session.expires)
        response = RedirectResponse("/login?notice=signed-out", status_code=303)
        self._clear_session(request, response)
        return response
