"""The ``memabra`` command line (typer + rich). The only place besides the admin app that renders."""

from memabra._cli._app import app, main

__all__ = ["app", "main"]
