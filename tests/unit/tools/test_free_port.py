"""Ports for local twins and test servers come from below the kernel's ephemeral range (no race with connect())."""

from __future__ import annotations

import socket

import pytest

from worldtune.tools.backends import local


def test_a_free_port_is_below_the_ephemeral_range_and_bindable_with_its_neighbours() -> None:
    low = local._ephemeral_low()
    for count in (1, 4):
        first = local.free_port(count=count)
        assert first >= 1024 and first + count <= low, (first, count, low)
        for port in range(first, first + count):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", local._ephemeral_low() - 1))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, taken, taken - 10])
        monkeypatch.setattr(local.random.SystemRandom, "randint", lambda self, a, b: next(picks))
        assert local.free_port() == taken - 10
