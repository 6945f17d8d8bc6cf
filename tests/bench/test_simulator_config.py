"""The simulator's world parameters: a setting the world cannot be built from is named."""

from __future__ import annotations

import pytest

from memabra import ConfigError
from memabra.evals.simulator import World, WorldConfig


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"off_topic": 30}, "off_topic"),
        ({"n_users": 0}, "n_users"),
        ({"slots": 0}, "slots"),
        ({"p_preferred": 1.5}, "p_preferred"),
        ({"drift_share": -0.1}, "drift_share"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_impossible_worlds_name_the_setting(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        World(WorldConfig(**settings))  # type: ignore[arg-type]


def test_the_default_world_still_builds() -> None:
    assert len(World(WorldConfig(off_topic=21)).rounds(3)) == 3
