"""A benchmark records the model the server says it served (X-Model), not only the one it was told (issue 55 item 4)."""

from __future__ import annotations

from worldtune.tools.results.compute import compute_result
from worldtune.tools.words.sample import Sample


def _sample(seq: int, served: str | None, ok: bool = True) -> Sample:
    return Sample(seq=seq, phase="full", steps=4, concurrency=1, endpoint="http://e", ok=ok, latency_s=1.0,
                  error_kind=None if ok else "server_error", served_model=served)  # fmt: skip


def test_the_result_names_the_served_model_beside_the_asked_one() -> None:
    result = compute_result([_sample(0, "/models/tiny"), _sample(1, "/models/tiny")], model="cosmos3-super", steps=4)
    assert (result.model, result.served_model) == ("cosmos3-super", "/models/tiny")
    assert not any("served models" in n for n in result.notes)


def test_answers_naming_two_models_are_said_and_failed_ones_do_not_count() -> None:
    samples = [_sample(0, "a"), _sample(1, "a"), _sample(2, "b"), _sample(3, "c", ok=False)]
    result = compute_result(samples, model="cosmos3-super", steps=4)
    assert result.served_model == "a"
    assert any("2 served models (a, b)" in n for n in result.notes)
    assert compute_result([_sample(0, None)], model="cosmos3-super", steps=4).served_model is None
