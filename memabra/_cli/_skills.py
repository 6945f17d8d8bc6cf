"""``memabra skills``: the skills registered in the log, and the versions of one its decisions offered.

A skill is registered (``registry``, kind ``skill``) by every process that starts with it; an edit
under the same name replaces the row's description and body, and the log keeps every body a
release registered under its digest (:mod:`memabra.storage._injected_bodies`). ``list`` shows the
registry now; ``show NAME`` one skill's current body and each version (digest) logged decisions
offered, ``--version DIGEST`` the body a version injected.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.text import Text

from memabra._cli._common import JsonOutOption, console, fail, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._tables import Table
from memabra._records import CandidateKind, RegistryItem
from memabra.storage import EpisodeLog
from memabra.storage._injected_bodies import BODY_DIGEST_KEY, kept_bodies, offered_versions
from memabra.storage._registry import registered

__all__ = ["skills_app"]

skills_app = typer.Typer(
    help="Skills registered in the log: list them, show one with the versions its decisions offered.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

SHOW_DECISIONS = 100_000
"""How many decisions ``memabra skills show`` reads unless told (``--last``, ``--all``): each is one
primary-key lookup of the skill's logged candidate, newest first, so the command costs the same on
a log of a thousand decisions as on one of a hundred million."""

OwnerOption = Annotated[
    str,
    typer.Option("--owner", help="A user's own skills (registered with their id as owner); default: the shared ones."),
]


def _when(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None


def _description(item: RegistryItem) -> str:
    # a skill's registry text is "name: description" (skill_items)
    prefix = f"{item.name}: "
    return item.text[len(prefix) :] if item.text.startswith(prefix) else item.text


def _version(item: RegistryItem) -> str | None:
    digest = item.metadata.get(BODY_DIGEST_KEY)
    return digest if isinstance(digest, str) else None


def _skill_row(item: RegistryItem) -> dict[str, Any]:
    return {
        "name": item.name,
        "id": item.id,
        "owner": item.owner,
        "description": _description(item),
        "version": _version(item),
        "tokens": item.tokens,
        "registered": _when(item.created_at),
        "updated": _when(item.updated_at),
        "times_chosen": item.times_chosen,
        "times_used": item.times_used,
        "last_chosen": _when(item.last_chosen_at),
    }


@skills_app.command("list")
def skills_list(db: DbOption = None, owner: OwnerOption = "", json_out: JsonOutOption = None) -> None:
    """Every skill registered and not deleted: its description, version (its body's digest, as
    each logged decision names it), tokens, when first registered and last updated, and how often
    it was chosen and used."""
    with run_guarded(EpisodeLog, db) as log:
        rows = [_skill_row(i) for i in run_guarded(registered, log.transactions, CandidateKind.SKILL, owner)]
    table = Table("name", "description", "version", "tokens", "updated", "chosen", "used")
    for r in rows:
        table.add_row(
            plain(r["name"]),
            plain(r["description"]),
            plain(r["version"] or "-"),
            str(r["tokens"]),
            plain(r["updated"]),
            str(r["times_chosen"]),
            str(r["times_used"]),
        )
    console.print(table)
    if not rows:
        console.print("no skills registered" + (f" for owner {owner!r}" if owner else ""), highlight=False)
    write_json(json_out, rows)


@skills_app.command("show")
def skills_show(
    name: Annotated[str, typer.Argument(help="The skill's name.")],
    db: DbOption = None,
    owner: OwnerOption = "",
    version: Annotated[
        str | None,
        typer.Option("--version", help="Print the body this version (a digest from the versions table) injected."),
    ] = None,
    last: Annotated[
        int,
        typer.Option(
            "--last",
            min=1,
            help="Read the versions of this many decisions, the newest (a line says if older ones were not read).",
        ),
    ] = SHOW_DECISIONS,
    all_: Annotated[
        bool, typer.Option("--all", help="Read every decision the log holds (--last does not apply).")
    ] = False,
    json_out: JsonOutOption = None,
) -> None:
    """One skill: its description and body as registered now, and each version (body digest) the
    newest --last decisions (of the owner, with --owner) offered, with how many offered and chose
    it and when. ``--version`` prints that version's body as the log kept it."""
    skill_id = f"skill:{name}"
    with run_guarded(EpisodeLog, db) as log:
        items = {i.id: i for i in run_guarded(registered, log.transactions, CandidateKind.SKILL, owner)}
        offered = run_guarded(offered_versions, log.transactions, skill_id, owner, last=None if all_ else last)
        versions = offered.versions
        current = items.get(skill_id)
        wanted = {v.digest for v in versions if v.digest} | ({version} if version else set())
        if current is not None and _version(current):
            wanted.add(str(_version(current)))
        bodies = run_guarded(kept_bodies, log.transactions, wanted)
    if current is None and not versions:
        whose = f" for owner {owner!r}" if owner else ""
        read = f" of the newest {offered.read:,} (--all reads every one)" if offered.older else ""
        fail(
            f"no skill {name!r} is registered{whose} or named by a logged decision{read}"
            " (`memabra skills list` names them)"
        )
    if version is not None:
        if version not in bodies:
            fail(f"skill {name!r}: the log keeps no body under version {version!r} (see `memabra skills show {name}`)")
        console.print(plain(bodies[version]), soft_wrap=True)
        return
    document: dict[str, Any] = {
        "skill": _skill_row(current) if current is not None else None,
        "body": current.body if current is not None else None,
        "decisions_read": "all" if offered.read is None else offered.read,
        "older_not_read": offered.older,
        "versions": [
            {
                "version": v.digest,
                "decisions": v.decisions,
                "chosen": v.chosen,
                "first_offered": _when(v.first_offered),
                "last_offered": _when(v.last_offered),
                "body_kept": v.digest in bodies,
            }
            for v in versions
        ],
    }
    if current is None:
        console.print(f"skill {name!r} is not registered now (deleted, or never registered here)", highlight=False)
    else:
        console.print(Text.assemble(("skill ", "bold"), name, " ", (f"version {_version(current) or '-'}", "dim")))
        console.print(plain(f"description: {_description(current)}"), soft_wrap=True)
        console.print(plain(current.body or ""), soft_wrap=True)
    table = Table("version", "decisions", "chosen", "first offered", "last offered", "body kept")
    for v in document["versions"]:
        table.add_row(
            plain(v["version"] or "- (logged before bodies were kept)"),
            str(v["decisions"]),
            str(v["chosen"]),
            plain(v["first_offered"]),
            plain(v["last_offered"]),
            "yes" if v["body_kept"] else "no",
        )
    console.print(table)
    if offered.older:
        console.print(
            f"versions offered by the newest {offered.read:,} decisions; older ones were not read: --last N or --all",
            highlight=False,
        )
    write_json(json_out, document)
