"""Prometheus's text exposition format (0.0.4): metric families and their rendering, apart from
what memabra reports in them (:mod:`memabra._metrics`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["CONTENT_TYPE", "Labels", "MetricFamily", "render_families"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What a Prometheus scrape expects of the text format."""

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MetricFamily:
    """One metric: its name, type, help line and samples (each its labels and value)."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    samples: tuple[tuple[Labels, float], ...]


def render_families(families: Iterable[MetricFamily]) -> str:
    """The families in the text exposition format: ``# HELP``, ``# TYPE``, then each sample."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            inner = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels)
            lines.append(f"{family.name}{{{inner}}} {_number(value)}" if labels else f"{family.name} {_number(value)}")
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    # the format's three escapes; any other character (a policy name is free text) stands as it is
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
