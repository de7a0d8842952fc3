"""Profile.basis: how each parameter is known, and the prior uncertainty the search starts from."""

from pathlib import Path

import pytest

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.profile import DEFAULT_SIGMA, ParamBasis, Profile


def _shipped() -> Profile:
    return Profile.load(Path(__file__).parents[3] / "policies" / "profiles" / "H200.yaml")


def test_assumed_fields_are_wide_and_fitted_ones_narrow() -> None:
    p = _shipped()
    assert "ring_overlap" in p.assumed
    assert p.basis_of("ring_overlap").kind == "assumed"
    assert p.uncertainty("ring_overlap") == DEFAULT_SIGMA["assumed"]
    assert p.basis_of("linear_tflops").kind == "fitted"
    assert p.uncertainty("linear_tflops") < p.uncertainty("ring_overlap")


def test_an_explicit_basis_wins_and_round_trips(tmp_path: Path) -> None:
    p = _shipped().with_changes(
        basis={"attn_tflops": ParamBasis(kind="measured", source="measured/H200-1gpu.raw.json", sigma=0.02)}
    )
    assert p.basis_of("attn_tflops").source.endswith("raw.json")
    assert p.uncertainty("attn_tflops") == 0.02
    p.dump(tmp_path / "p.yaml")
    again = Profile.load(tmp_path / "p.yaml")
    assert again.basis_of("attn_tflops") == p.basis_of("attn_tflops")


def test_unknown_parameter_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput) as err:
        _shipped().basis_of("warp_speed")
    assert "warp_speed" in str(err.value)
