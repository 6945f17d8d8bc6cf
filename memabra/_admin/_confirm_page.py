"""The confirmation a destructive write asks for when the page's script did not (JavaScript
blocked by policy, or not loaded yet).

A form whose write cannot be undone carries ``confirmed=""``; ``admin.js`` sets it to ``yes`` once
the person has answered its question. A post that arrives with the field still empty was sent
without that question: it changes nothing and gets a page that asks it, with the same fields and
``confirmed=yes`` behind a button, and a way back. A client that sends no ``confirmed`` field at
all (a script with a bearer token, the API's own callers) is not asked: it never saw a form.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from memabra._admin._plumbing import _AdminBase, _Auth, _raw_path

__all__ = ["unconfirmed"]


def unconfirmed(
    admin: _AdminBase,
    request: Request,
    auth: _Auth,
    form: Mapping[str, str],
    *,
    question: str,
    action: str,
    back: tuple[str, str],
) -> Response | None:
    """The page that asks ``question`` before the write, or ``None`` when the form was confirmed
    (or came from no form of this view). ``action``: the label of the button that goes ahead;
    ``back``: the link (path, label) that leaves everything as it was."""
    if form.get("confirmed", "yes") == "yes":
        return None
    fields = [(name, value) for name, value in form.items() if name != "confirmed"]
    return admin._render(
        "confirm.html",
        auth=auth,
        question=question,
        action=action,
        target=_raw_path(request),
        fields=fields,
        back_url=back[0],
        back_label=back[1],
    )
