"""The few SkyPilot client calls a benchmark attempt makes, as a FAKE (a mock: tests of how worldtune judges
a hung or cut SkyPilot, which the real API server cannot be made to do on demand). Not a test module."""

from __future__ import annotations

from typing import Any


class FakeSkyBase:
    """sky.Task, sky.Resources, sky.get (requests are their own answers) and sky.exec (job 7)."""

    class Task:
        def __init__(self, name: str, run: str) -> None:
            self.name, self.run = name, run

        def set_resources(self, resources: Any) -> None:
            self.resources = resources

        def update_secrets(self, secrets: dict[str, str]) -> None:
            self.secrets = {**getattr(self, "secrets", {}), **secrets}

    @staticmethod
    def Resources(**kw: Any) -> dict[str, Any]:  # SkyPilot spells it so
        return kw

    def get(self, request: Any) -> Any:
        return request

    def exec(self, task: Any, cluster_name: str) -> tuple[int, None]:
        return 7, None
