"""One deploy path, one set of deploy checks (issue 16): `worldtune deploy --dry-run` (build_deployment), a real
deploy (quote_deploy, deploy), the MCP tools and the agent (which deploys through them) refuse the same bad inputs
with the same message, naming the field, the value and what is valid, before anything is started or spent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from worldtune.tools.deployments import checks as deploy_checks
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.deployments.preview import build_deployment
from worldtune.tools.mcp.server import build_server
from worldtune.tools.plans.spend import quote
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.plan import Plan

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
BASE = {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "model": "cosmos3-super", "engine": "twin", "capacity": "on-demand"}
# (what is wrong, the arguments, the field refused, a word of what is valid)
BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("spot on Slurm", {"infra": "slurm/x", "capacity": "spot"}, "capacity", "on-demand on Slurm"),
    ("serverless on Kubernetes", {"infra": "kubernetes", "capacity": "serverless"}, "capacity", "on-demand or spot"),
    ("vllm-omni on local", {"infra": "local", "engine": "vllm-omni"}, "engine", "no GPU"),
    ("a plan vLLM-Omni refuses", {"infra": "local", "plan": "tp3"}, "plan", "a plan vLLM-Omni accepts"),
    ("a capacity that is none", {"infra": "local", "capacity": "reserved"}, "capacity", "expected one of"),
    ("an engine that is none", {"infra": "local", "engine": "sglang"}, "engine", "expected one of"),
    ("an infra with a space", {"infra": " nebius"}, "infra", "without spaces"),
    ("an infra that is none", {"infra": "local/x"}, "infra", "nothing after it"),
    ("a time scale on vllm-omni", {"infra": "nebius", "engine": "vllm-omni", "time_scale": 5.0},
     "twin_profile/time_scale", "only with engine twin"),
    ("an unknown GPU", {"infra": "local", "gpu": "Z100"}, "gpu", ""),
]  # fmt: skip
IDS = [case[0] for case in BAD]


def refusal(call: Any, *args: Any, **arguments: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        call(*args, **arguments)
    return refused.value


@pytest.mark.parametrize(("why", "bad", "field", "valid"), BAD, ids=IDS)
def test_the_dry_run_and_a_real_deploy_refuse_the_same_inputs_identically(
    tmp_path: Path, why: str, bad: dict[str, Any], field: str, valid: str
) -> None:
    arguments = {**BASE, **bad}
    store = Store(tmp_path / "w.db")
    dry = refusal(build_deployment, **arguments)
    # as given, unvalidated: a None the word's types would refuse still reaches the checks, which must say the same
    request = DeployRequest.model_construct(**arguments)
    quoted = refusal(deploying.quote_deploy, request, store=store)
    real = refusal(deploying.deploy, request, store=store)
    assert dry.field == quoted.field == real.field == field, why
    assert str(dry) == str(quoted) == str(real), why
    assert f"{field}={dry.value!r} is not valid: " in str(dry) and valid in str(dry), str(dry)
    assert store.list_deployments() == [] and store.ledger() == []  # refused before anything started


def test_the_mcp_deploy_tool_refuses_with_the_same_message(tmp_path: Path) -> None:
    """The MCP tools (and so the agent) quote through the same checks: the tool error carries the dry run's words."""
    # the tool's schema takes these values (a capacity or engine outside its Literal is refused by the schema)
    within_schema = [case for case in BAD if case[2] not in ("capacity", "engine") or case[1].get("infra") != "local"
                     or case[0] == "vllm-omni on local"]  # fmt: skip
    assert len(within_schema) == len(BAD) - 2

    async def main() -> list[tuple[str, str]]:
        answers = []
        async with Client(build_server(str(tmp_path / "w.db"))) as client:
            for why, bad, _, _ in within_schema:
                arguments = {**BASE, **bad}
                result = await client.call_tool("deploy", {**arguments, "confirm": True})
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert result.is_error, f"{why}: {text}"
                answers.append((str(refusal(build_deployment, **arguments)), text))
        return answers

    for dry, text in anyio.run(main):
        assert dry in text, (dry, text)
    assert Store(tmp_path / "w.db").list_deployments() == []


def test_a_noise_seed_is_for_twins_only_in_the_one_set_of_checks(tmp_path: Path) -> None:
    """noise_seed is twin-only like time_scale and twin_profile: the quote, the deploy and the MCP tool refuse it for
    vllm-omni with the same words, before anything is quoted as a commitment or started."""
    arguments = {**BASE, "infra": "nebius", "engine": "vllm-omni", "noise_seed": 3}
    store = Store(tmp_path / "w.db")
    # as given, unvalidated: a None the word's types would refuse still reaches the checks, which must say the same
    request = DeployRequest.model_construct(**arguments)
    quoted = refusal(deploying.quote_deploy, request, store=store)
    real = refusal(deploying.deploy, request, store=store)
    assert quoted.field == real.field == "noise_seed" and str(quoted) == str(real)

    async def main() -> str:
        async with Client(build_server(str(tmp_path / "w.db"))) as client:
            result = await client.call_tool("deploy", arguments)  # unconfirmed: refused before the quote
            assert result.is_error
            return " ".join(getattr(c, "text", "") for c in result.content)

    assert str(quoted) in anyio.run(main)
    assert store.list_deployments() == [] and store.ledger() == []


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "real"])
def test_worldtune_deploy_says_the_same_with_and_without_dry_run(tmp_path: Path, dry_run: bool) -> None:
    bad = {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "infra": "slurm/x", "engine": "twin", "capacity": "spot"}
    flags = [f"--{k}={v}" for k, v in bad.items()] + ["--db", str(tmp_path / "w.db"), "--json", "--yes"]
    done = subprocess.run([WORLDTUNE, "deploy", *flags, *(["--dry-run"] if dry_run else [])],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    quoted = refusal(deploying.quote_deploy, DeployRequest(**bad), store=Store(tmp_path / "q.db"))
    assert json.loads(done.stdout)["reason"] == str(quoted)


def test_both_paths_check_through_the_one_function(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Can fail: a path that checks on its own (not through check_deploy_inputs) is not counted here."""
    seen: list[str] = []
    real = deploy_checks.check_deploy_inputs

    def counting(*args: Any, **kwargs: Any) -> deploy_checks.DeployInputs:
        seen.append(str(args[2] if len(args) > 2 else kwargs["infra"]))
        return real(*args, **kwargs)

    import worldtune.tools.deployments.preview as preview

    monkeypatch.setattr(deploying, "check_deploy_inputs", counting)
    monkeypatch.setattr(preview, "check_deploy_inputs", counting)
    build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    deploying.quote_deploy(
        DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", infra="local"), store=Store(tmp_path / "w.db")
    )
    assert seen == ["nebius", "local"]


def test_serverless_rents_one_replica_s_node_and_is_quoted_at_its_peak() -> None:
    """SkyServe runs each replica on its own node of world_size GPUs (up to plan.replicas of them): the dry run's
    offer and the quote's are that node, and the quote counts every replica's node up at once."""
    dry = build_deployment("H200", "8x1gpu", infra="nebius", capacity="serverless")
    spend = quote("deploy", "H200", Plan.parse("8x1gpu"), infra="nebius", capacity="serverless")
    assert dry.offer is not None and spend.offer is not None
    assert dry.offer.gpu_count == spend.offer.gpu_count == 1 and dry.offer.id == spend.offer.id
    assert spend.usd_per_hour == pytest.approx(8 * spend.offer.usd_per_hour) == dry.usd_per_hour
    on_demand = quote("deploy", "H200", Plan.parse("8x1gpu"), infra="nebius", capacity="on-demand")
    assert on_demand.offer is not None and on_demand.offer.gpu_count == 8
    assert on_demand.usd_per_hour == on_demand.offer.usd_per_hour


def test_local_twins_rehearse_any_capacity_the_search_may_choose(tmp_path: Path) -> None:
    """The agent rehearses a serverless or spot offer on local twins (priced as the offer, run as twins), so the
    checks take every capacity there; what each infra takes is Infra.capacities, the same list the agent's
    candidates are cut to (agent/steps.listed_offers)."""
    from worldtune.tools.words.infra import Infra

    store = Store(tmp_path / "w.db")
    for capacity in Infra.parse("local").capacities:
        spend = deploying.quote_deploy(DeployRequest(**{**BASE, "infra": "local", "capacity": capacity}), store=store)
        assert spend.capacity == capacity
    assert Infra.parse("slurm/x").capacities == ("on-demand",)
    assert "serverless" not in Infra.parse("kubernetes").capacities
    assert Infra.parse("nebius").capacities == ("on-demand", "spot", "serverless")


def test_the_agent_is_offered_only_what_its_infra_can_deploy(tmp_path: Path) -> None:
    """The agent's candidates come from list_offers (real in-process MCP server) cut to Infra.capacities: a Slurm run
    never picks a spot or serverless offer that the deploy tool would then refuse, a local rehearsal keeps them all."""
    import asyncio

    from worldtune.agent.steps import listed_offers
    from worldtune.agent.tools import connect

    async def offered(infra: str) -> set[str]:
        async with connect(str(tmp_path / "w.db"), None) as tools:
            return {o.capacity for o in await listed_offers(tools, infra)}

    assert asyncio.run(offered("local")) == {"on-demand", "spot", "serverless"}
    assert asyncio.run(offered("slurm/x")) == {"on-demand"}
    assert asyncio.run(offered("kubernetes")) == {"on-demand", "spot"}
