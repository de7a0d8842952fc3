"""The record says what is simulated, measured and assumed, and the report's pieces read at a glance (issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worldtune.agent.provenance import assumed_terms, labels
from worldtune.agent.provenance import provenance as provenance_of
from worldtune.agent.report import _plot, _readable_log_axis, readable_event
from worldtune.tools.results.report_data import frontier
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.run_summary import Provenance, RunSummary


def provenance(record: dict[str, Any]) -> Provenance:
    """The provenance of a record as the database keeps it (read back as the RunSummary word)."""
    return provenance_of(RunSummary.model_validate(record))


def _candidate(key: str, stage: str, latency_s: float, usd_per_clip: float, **fields: Any) -> dict[str, Any]:
    """A candidate row as a run's record keeps it (tools/words/run_summary.CandidateRow)."""
    row = {"key": key, "gpu": "H200", "plan": "tp8", "offer": "nebius/x/H200:8/spot", "capacity": "spot",
           "usd_per_hour": 11.6, "nodes": 1, "stage": stage, "feasible": True, "latency_s": latency_s,
           "latency_q_s": latency_s, "clips_per_hour_per_node": 30.0, "usd_per_clip": usd_per_clip,
           "predicted_latency_s": None, "predicted_usd_per_clip": None,
           "predicted_clips_per_hour_per_node": None}  # fmt: skip
    return row | fields


def _record(engine: str = "twin", plan: str = "cfg2-r4-vae8", samples: int = 5) -> dict[str, Any]:
    offer = {"infra": "nebius", "region": "eu-north1", "gpu": "H200", "gpu_count": 8, "capacity": "spot",
             "usd_per_hour": 11.6, "source": "snapshot:2026-11-29", "as_of": "2026-11-29"}  # fmt: skip
    basis = {"answer_basis": "modelled: the twin's model-seconds", "priced_as": "offer price x modelled GPU seconds"}
    spend = {"gpu_hours": 1.0, "usd": 11.6, "budget_usd": None, "deployments": 1, "replans": 0, "benchmarks": 1,
             "model_seconds": 450.0, "answer_hours": 0.5, "lanes": 1, "full_requests": samples, "confidence": 0.99,
             **basis}  # fmt: skip
    return {
        "run_id": "tune-x",
        "thread_id": "tune-x",
        "spend": spend,
        "options": {
            "engine": engine,
            "infra": "local" if engine == "twin" else "nebius",
            "time_scale": 300.0,
            "twin_profile": None,
        },
        "goal": {
            "latency_percentile": 95,
            "latency_bound_s": 150.0,
            "describe": "p95 <= 150 s",
            "workload": {"guardrails": False},
        },
        "recommendation": {
            "gpu": "H200",
            "plan": plan,
            "key": "k1",
            "offer_detail": offer,
            "replicas": 1,
            "replicas_per_node": 1,
            "nodes": 1,
            "capacity": "spot",
            "offer": "nebius/eu-north1/H200:8",
            "usd_per_hour": 11.6,
        },
        "measured": {"latency_p50_s": 109.8, "latency_p95_s": 109.9, "latency_p95_upper_s": 110.4, "samples": samples},
        "predicted": {"latency_p50_s": 110.0},
        "candidates": [],
    }


def test_a_twin_run_is_labelled_simulated_with_profile_and_time_scale() -> None:
    p = provenance(_record())
    assert p.simulated is True and "twin engine" in p.measured_figures and "time scale 300" in p.measured_figures
    assert "shipped profile" in p.measured_figures and "no GPU ran" in p.measured_figures
    assert "2026-11-29" in p.prices and "modelled" in p.spend
    real = provenance(_record(engine="vllm-omni"))
    assert real.simulated is False and "real GPUs" in real.measured_figures and real.twin_profile is None
    assert labels(p)[0].startswith("simulated: ") and labels(real)[0].startswith("measured: ")
    assert "time to a verified answer 0.50 h" in p.spend
    # what a record keeps reads back as the same words (the claim left out while there is none)
    assert Provenance.model_validate(p.model_dump(mode="json")) == p


def test_a_run_given_several_twin_profiles_says_which() -> None:
    """`--twin-profile` may name several files or a folder (agent/configuration.TuneOptions): the record keeps the
    list and the provenance names it (a rehearsal through the real graph found a record that could not be read)."""
    record = _record()
    record["options"]["twin_profile"] = ["/truth/H200.yaml", "/truth/B200.yaml"]
    p = provenance(record)
    assert p.twin_profile == ["/truth/H200.yaml", "/truth/B200.yaml"] and "/truth/B200.yaml" in p.measured_figures
    assert RunSummary.model_validate(RunSummary.model_validate(record).record()).options.twin_profile == p.twin_profile


def test_assumed_terms_follow_the_plan() -> None:
    ring = assumed_terms("H200", Plan.parse("cfg2-r4-vae8"), guardrails=False)
    # every ring term the shipped profile assumes; the VAE tile terms are measured (issue 13), so none of VAE's
    assert {"ring_overlap", "ring_hop_latency_us"} <= set(ring) and "hsdp_overlap" not in ring
    assert not [t for t in ring if t.startswith("vae_")]
    hsdp = assumed_terms("H200", Plan.parse("cfg2-u4-hsdp8"), guardrails=False)
    assert "hsdp_overlap" in hsdp and "ring_overlap" not in hsdp and "fp8_linear_speedup" not in hsdp
    assert "guardrail_base_s" in assumed_terms("H200", Plan.parse("tp8"), guardrails=True)
    assert "guardrail_base_s" not in assumed_terms("H200", Plan.parse("tp8"), guardrails=False)


def test_a_percentile_from_few_samples_is_not_claimed() -> None:
    few = provenance(_record(samples=5)).latency
    assert "not claimable" in few.empirical and "n=5 < 90" in few.empirical
    assert few.claim is not None and "110.4 s at 95% confidence" in few.claim
    many = provenance(_record(samples=120)).latency
    assert "not claimable" not in many.empirical


def test_few_samples_as_the_runner_records_them_are_measured_but_not_claimed() -> None:
    """agent/record._figures keeps latency_p95_s null below the order-statistic n: the page must still say that n
    samples were measured and that the percentile is not claimable, not "none measured" (CI of stop 20)."""
    record = _record(samples=5)
    record["measured"] = {"latency_p50_s": 109.8, "latency_p95_s": None, "p95_upper_95conf_normal": 110.4,
                          "latency_p95_claim": "not claimable (n=5 < 90)", "samples": 5}  # fmt: skip
    latency = provenance(record).latency
    assert latency.empirical == "p95 not claimable on its own (n=5 < 90 samples measured)", latency
    assert latency.claim is not None and "110.4 s at 95% confidence" in latency.claim
    record["measured"] = {"latency_p50_s": None, "latency_p95_s": None, "samples": 0}
    none = provenance(record).latency
    assert none.empirical == "none measured" and none.claim is None and "claim" not in none.model_dump()


def test_events_print_dicts_as_words() -> None:
    line = "probe k: {'per_step_s': 1.012, 'fixed_s': 3.86} ($7.00, 900 model-s)"
    assert readable_event(line) == "probe k: per_step_s 1.012, fixed_s 3.86 ($7.00, 900 model-s)"
    assert readable_event("no dict {here") == "no dict {here"


def test_log_axes_read_as_plain_numbers(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.scatter([40, 60, 130, 700], [0.3, 0.6, 2.0, 6.0])
    ax.set_xscale("log")
    ax.set_yscale("log")
    _readable_log_axis(ax.xaxis)
    _readable_log_axis(ax.yaxis)
    fig.canvas.draw()
    texts = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    plt.close(fig)
    assert texts and not any("10^" in t or "times" in t or "$" in t for t in texts), texts
    assert "100" in texts and "0.5" in texts, texts


def test_plot_draws_every_stage_with_gpu_colours(tmp_path: Path) -> None:
    record = _record()
    record["candidates"] = [
        _candidate("a", "predicted", 90.0, 0.9, capacity="on-demand"),
        _candidate("b", "probed", 110.0, 0.5),
        _candidate("k1", "measured", 120.0, 0.4, gpu="B200"),
        _candidate("c", "predicted", 130.0, 0.6),  # slower and dearer than b: off the frontier
    ]
    summary = RunSummary.model_validate(record)
    out = tmp_path / "cost.png"
    front = [summary.candidates[i] for i in frontier(summary.candidates, "latency_s", "usd_per_clip")]
    assert [c.key for c in front] == ["a", "b", "k1"]  # each is cheaper but slower than the one before
    _plot(summary, "latency_s", "usd_per_clip", "latency (s)", "USD per clip", out, front)
    assert out.is_file() and out.stat().st_size > 5_000


def test_tune_json_carries_the_provenance() -> None:
    from worldtune.cli_tune import _output
    from worldtune.tools.words.run_summary import RunOutcome

    record = _record()
    out = _output(RunOutcome(run_id="tune-x", status="completed", summary=RunSummary.model_validate(record)))
    assert out["provenance"]["simulated"] is True and "twin engine" in out["provenance"]["measured_figures"]
    assert "not claimable" in out["provenance"]["latency"]["empirical"]


def test_interactive_page_names_each_candidate_and_says_simulated(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("plotly")
    from worldtune.agent.report_interactive import _ticks, write_interactive

    record = _record()
    record["provenance"] = provenance(record).model_dump(mode="json")  # as every record written since issue 15 has it
    record["candidates"] = [
        _candidate("k1", "measured", 110.0, 0.34, plan="cfg2-r4-vae8"),
        _candidate("k2", "predicted", 95.0, 0.5),
    ]
    summary = RunSummary.model_validate(record)
    out = tmp_path / "candidates.html"
    assert write_interactive(summary, out, [summary.candidates[1], summary.candidates[0]])
    text = out.read_text()
    assert "cfg2-r4-vae8" in text and "simulated on the twin" in text and "SIMULATED" in text
    assert _ticks([40.0, 700.0])["ticktext"] == ["50", "100", "200", "500"]
