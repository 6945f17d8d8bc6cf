"""Root typer application; sub-commands register themselves from sibling modules."""

from __future__ import annotations

import typer

app = typer.Typer(name="memabra", help="Learned, logged, evaluable context routing for LangGraph agents.", no_args_is_help=True)


def main() -> None:
    app()
