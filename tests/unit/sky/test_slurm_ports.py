"""On the local Slurm cluster every deployment's servers bind this machine's loopback: two deployments launched at
once must not pick the same ports (both probe before either binds)."""

from __future__ import annotations

import socket

from worldtune.sky.backend import _free_port_range


def test_deployments_start_their_search_at_places_of_their_own() -> None:
    bases = {_free_port_range(2, f"wt-{i:08x}") for i in range(40)}
    assert len(bases) >= 35  # 40 ids over 1,200 places: a few may meet, most do not
    assert all(18000 <= b <= 29990 and (b - 18000) % 10 == 0 for b in bases)
    assert _free_port_range(2, "wt-00000007") == _free_port_range(2, "wt-00000007")  # one id, one place


def test_a_taken_port_moves_the_range_on() -> None:
    base = _free_port_range(3, "wt-taken")
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 2))
        held.listen()
        moved = _free_port_range(3, "wt-taken")
    assert moved != base and not (moved <= base + 2 < moved + 3)
