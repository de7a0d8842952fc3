"""The micro-benchmark's sub-group collectives: which ranks form the groups, which per-layer cases each group size
runs."""

from __future__ import annotations

import pytest

from worldtune.policies.instruments import microbench as mb


def test_sub_groups_are_consecutive_blocks() -> None:
    assert mb.sub_groups(8, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert mb.sub_groups(8, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mb.sub_groups(2, 2) == [[0, 1]]
    for world, size in ((8, 3), (4, 1), (4, 8)):
        with pytest.raises(ValueError, match="dividing the world"):
            mb.sub_groups(world, size)


def test_group_cases_are_the_per_layer_sizes_of_that_degree() -> None:
    names = [c.name for c in mb.group_cases(mb.FULL, 4)]
    assert {"a2a-u4-qkv", "a2a-u4-out", "allreduce-sp1", "allgather-hsdp-bf16", "allgather-cfg"} <= set(names)
    assert {"a2a-probe", "allreduce-probe", "allgather-probe"} <= set(names)
    assert not any(n.startswith(("a2a-u2", "a2a-u8")) or "sweep" in n for n in names)
    by_name = {c.name: c for c in mb.group_cases(mb.FULL, 4)}
    assert by_name["a2a-u4-qkv"].buffer_bytes == mb.ulysses_bytes(mb.FULL, 4)[0]


def test_group_sizes_flag_is_parsed_and_checked() -> None:
    assert mb._group_sizes("4,2") == [4, 2]
    with pytest.raises(SystemExit):
        mb.main(["--out", "x.json", "--world", "4", "--groups", "3", "--device", "cpu", "--tiny"])
    with pytest.raises(SystemExit):
        mb.main(["--out", "x.json", "--world", "4", "--groups", "four", "--device", "cpu", "--tiny"])
