"""Plan strings: parsing in any order, canonical printing, round trips, serve flags and bad input."""

from __future__ import annotations

import pytest

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.plan import Plan


@pytest.mark.parametrize(
    "text",
    [
        "cfg2-u4-hsdp8",
        "tp8",
        "8x1gpu",
        "2xtp4",
        "cfg2-u2-r2-hsdp8",
        "1gpu",
        "fp8",
        "cfg2-hsdp2-fp8",
        "tp2-cfg2-vae8",
    ],
)
def test_round_trip_is_identity_for_canonical_strings(text: str) -> None:
    assert str(Plan.parse(text)) == text


def test_any_token_order_prints_canonically() -> None:
    assert str(Plan.parse("hsdp8-u4-cfg2")) == "cfg2-u4-hsdp8"
    assert str(Plan.parse("fp8-r2-cfg2-u2-hsdp8")) == "cfg2-u2-r2-hsdp8-fp8"


def test_sizes() -> None:
    plan = Plan.parse("cfg2-u4-hsdp8")
    assert (plan.world_size, plan.gpus, plan.hsdp_replicate, plan.sequence_parallel) == (8, 8, 1, 4)
    assert Plan.parse("8x1gpu").gpus == 8
    assert Plan.parse("2xtp4").world_size == 4 and Plan.parse("2xtp4").gpus == 8
    assert Plan.parse("hsdp8").world_size == 8  # standalone HSDP sets the world


def test_serve_flags_match_vllm_omni_recipe() -> None:
    assert Plan.parse("cfg2-u4-hsdp8").serve_flags() == [
        "--cfg-parallel-size", "2", "--ulysses-degree", "4", "--use-hsdp", "--hsdp-shard-size", "8",
    ]  # fmt: skip
    assert Plan.parse("tp8").serve_flags() == ["--tensor-parallel-size", "8"]
    assert Plan.parse("cfg2-u4-hsdp4").serve_flags()[-2:] == ["--hsdp-replicate-size", "2"]


@pytest.mark.parametrize("text", ["", "tp", "x8", "tp8-tp4", "q4", "tp0", "0x1gpu", "cfg2--u4"])
def test_bad_strings_name_the_field_and_the_grammar(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Plan.parse(text)
    assert info.value.field == "plan"
    assert "tpN" in str(info.value)


def test_a_plan_field_holds_a_plan_reads_and_writes_its_string_and_lists_as_a_string() -> None:
    from pydantic import BaseModel, Field, ValidationError

    from worldtune.tools.words.plan import PlanField

    class Typed(BaseModel):
        plan: PlanField = Field(description="a plan")
        early: PlanField | None = None

    class Text(BaseModel):
        plan: str = Field(description="a plan")
        early: str | None = None

    word = Typed(plan="hsdp8-u4-cfg2")
    assert word.plan == Plan(cfg=2, ulysses=4, hsdp=8) and word.early is None
    assert word.model_dump(mode="json") == {"plan": "cfg2-u4-hsdp8", "early": None}
    assert Typed.model_validate_json(word.model_dump_json()) == word
    # a word whose `plan: str` became a PlanField lists the same schema to MCP clients (tool listing unchanged)
    for mode in ("validation", "serialization"):
        typed = Typed.model_json_schema(mode=mode)["properties"]
        assert typed == Text.model_json_schema(mode=mode)["properties"]
    with pytest.raises(ValidationError, match="tpx"):
        Typed(plan="tpx")


def test_a_candidate_key_reads_offer_plan_and_shape_once() -> None:
    from worldtune.policies.search import CandidateKey, hardware_key, offer_of

    text = "nebius/eu-north1/H200:8/spot|cfg2-u4-hsdp8"
    key = CandidateKey.of(text)
    assert key.offer_id == offer_of(text) == "nebius/eu-north1/H200:8/spot"
    assert key.plan == Plan(cfg=2, ulysses=4, hsdp=8)
    assert (key.shape, key.gpu) == ("H200:8", "H200")
    assert key.hardware == hardware_key(text) == "H200:8|cfg2-u4-hsdp8"
    with pytest.raises(InvalidInput):
        CandidateKey.of("nebius/eu-north1/H200:8/spot|cfg3x")
