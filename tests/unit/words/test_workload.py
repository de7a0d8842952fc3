"""The anchor workload, its token count and the errors for bad fields."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from worldtune.tools.words.models import get_model
from worldtune.tools.words.workload import Workload, anchor_workload


def test_anchor_tokens_match_reference() -> None:
    wl = anchor_workload()
    assert (wl.latent_frames, wl.latent_grid, wl.video_tokens) == (48, (23, 40), 44160)
    assert wl.seed == 17 and wl.steps == 35 and wl.guidance_scale == 6.0 and not wl.guardrails


def test_super_generator_is_31_2b() -> None:
    assert get_model("cosmos3-super").generator_params_b == pytest.approx(31.2, rel=0.01)
    assert get_model("nvidia/Cosmos3-Super").key == "cosmos3-super"


def test_form_fields_put_max_sequence_length_in_extra_params() -> None:
    fields = anchor_workload().form_fields()
    assert "max_sequence_length" not in fields
    extra = json.loads(fields["extra_params"])
    assert extra["max_sequence_length"] == 4096 and extra["guardrails"] is False
    assert fields["size"] == "1280x720" and fields["num_inference_steps"] == "35"


@pytest.mark.parametrize(
    ("changes", "word"),
    [
        ({"width": 1000}, "size"),
        ({"fps": 25}, "fps"),
        ({"num_frames": 400}, "num_frames"),
        ({"steps": 0}, "steps"),
        ({"guidance_scale": 30}, "guidance_scale"),
        ({"model": "cosmos9"}, "model"),
    ],
)
def test_bad_fields_are_named(changes: dict[str, object], word: str) -> None:
    with pytest.raises(ValidationError, match=word):
        Workload.model_validate({**anchor_workload().model_dump(), **changes})


def test_edge_defaults() -> None:
    wl = anchor_workload("cosmos3-edge")
    assert wl.size == "832x480" and wl.guidance_scale == 5.0 and wl.flow_shift == 3.0
