"""The `worldtune` command line. Each command is a thin wrapper over a typed function in the rooms.

Heavy libraries (SkyPilot, LangGraph, plotting) are imported inside the commands that need them, so
`worldtune --help`, `estimate` and `mcp` start fast.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperOption

from worldtune import __version__
from worldtune.tools.words.errors import WorldtuneError, describe

app = typer.Typer(
    name="worldtune",
    help="Find the cheapest way to serve Cosmos 3 on vLLM-Omni that meets a goal, with evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_option_type = TyperOption.display_type_rich


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """No value type beside a flag: typer 0.29 prints `--json <bool>`, which reads as if it took a value."""
    return None if self.is_flag else _option_type(self, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]
# Wide tables when piped (rich would wrap at 80 columns); the terminal's width otherwise.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

# Modules that add their own commands with register(app); each imports its heavy parts lazily.
COMMAND_MODULES: tuple[str, ...] = (
    "worldtune.cli_deploy",
    "worldtune.cli_bench",
    "worldtune.cli_mcp",
    "worldtune.cli_calibrate",
    "worldtune.cli_tune",
)

EXIT_INVALID = 2


def finite_json(data: Any) -> Any:
    """`data` with every non-finite float as null: JSON has no Infinity or NaN, and scripts' parsers refuse them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite_json(v) for v in data]
    return data


def emit_json(data: Any) -> None:
    """Print machine-readable output on stdout (nothing else goes there with --json); strict JSON only."""
    sys.stdout.write(json.dumps(finite_json(data), indent=2, default=str, allow_nan=False) + "\n")


def fail(message: str | BaseException, as_json: bool = False, extra: dict[str, Any] | None = None) -> typer.Exit:
    """Report a refused input (stderr, or a JSON object) and return the exit to raise.

    An exception is described in words (pydantic's errors as field=value: rule); the message is
    printed literally, so an install hint such as `worldtune[calibrate]` is not taken for Rich markup.
    """
    text = describe(message) if isinstance(message, BaseException) else message
    if as_json:
        emit_json({"valid": False, "reason": text, **(extra or {})})
    else:
        err_console.print(f"[bold red]error:[/] {escape(text)}")
    return typer.Exit(EXIT_INVALID)


def need_extra(what: str, module: str, extra: str, as_json: bool = False) -> None:
    """Exit 2 naming the extra to install when `module` is missing; called before a command starts anything."""
    from worldtune.tools.words.errors import MissingExtra, require_extra

    try:
        require_extra(what, module, extra)
    except MissingExtra as exc:
        raise fail(exc, as_json) from exc


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


ModelOpt = Annotated[str, typer.Option(help="cosmos3-super | cosmos3-nano | cosmos3-edge | cosmos3-super-i2v-4step")]
GpuOpt = Annotated[str, typer.Option(help="GPU type: H200 or B200 (calibrated), H100/B300 with --profile")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="predict with this profile YAML instead")]
StepsOpt = Annotated[int | None, typer.Option(help="denoising steps (anchor: 35)")]
CapacityOpt = Annotated[str, typer.Option(help="price offers at on-demand | spot | serverless")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]


@app.command()
def estimate(
    plan: Annotated[str, typer.Option(help="plan string, e.g. cfg2-u4-hsdp8, tp8, 8x1gpu, 2xtp4")],
    model: ModelOpt = "cosmos3-super",
    gpu: GpuOpt = "H200",
    steps: StepsOpt = None,
    profile: ProfileOpt = None,
    capacity: CapacityOpt = "on-demand",
    as_json: JsonOpt = False,
) -> None:
    """Predict latency, per-step and fixed time, memory, throughput and cost per clip of one plan."""
    from worldtune.tools.plans.estimate import estimate as run_estimate

    try:
        result = run_estimate(model=model, gpu=gpu, plan=plan, steps=steps, profile_path=profile, capacity=capacity)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json, {"gpu": gpu, "plan": plan}) from exc
    if as_json:
        emit_json(result.model_dump(mode="json"))
    else:
        _print_estimate(result)
    if not result.valid:
        if not as_json:
            err_console.print(f"[bold red]refused:[/] {result.reason}")
        raise typer.Exit(EXIT_INVALID)


def _server_parts(e: Any) -> str:
    if e.server_s is None:
        return "-"
    guard = f" + guardrails {_fmt(e.guardrail_s)}" if e.guardrail_s else ""
    return f"{_fmt(e.fixed_s)} + {e.steps} x {_fmt(e.per_step_s, 3)}{guard}"


def _print_estimate(e: Any) -> None:
    table = Table(title=f"{e.model} on {e.gpu}, plan {e.plan}, {e.steps} steps", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("valid", "yes" if e.valid else "no"),
        ("reason", e.reason),
        ("GPUs (replicas x world)", f"{e.gpus} ({e.replicas} x {e.world_size})"),
        ("latency per clip (s), a client's end to end", _fmt(e.latency_s)),
        (
            "  = server's generation time + client (s)",
            f"{_fmt(e.server_s)} + {_fmt(e.client_overhead_s)} (MP4 encode, request, transfer)"
            if e.server_s is not None
            else "-",
        ),
        ("  server = fixed + steps x per step (s)", _server_parts(e)),
        (
            "no measured cell of this family",
            ", ".join(e.unmeasured_families) + f" (on {e.gpu}: the prediction rests on the mechanisms and other "
            "families' fits)"
            if e.unmeasured_families
            else "none: every family of the plan has a published cell on this GPU",
        ),
        (
            "latency 90% range (s)",
            f"{e.latency_range_s[0]:.1f}-{e.latency_range_s[1]:.1f} (±{e.latency_sigma:.1%} one sigma, the profile's "
            "prior uncertainty: modelled, not measured)"
            if e.latency_range_s and e.latency_sigma is not None
            else "-",
        ),
        (
            "assumed terms",
            (
                ", ".join(f"{n} ({e.uncertainty_shares.get(n, 0):.0%} of the variance)" for n in e.assumed_terms)
                or "none"
            )
            + (" [relies on assumptions]" if e.relies_on_assumed else ""),
        ),
        ("per step (s)", _fmt(e.per_step_s, 3)),
        ("fixed (s)", _fmt(e.fixed_s)),
        ("memory per GPU (GiB)", _fmt(e.memory_gib_per_gpu)),
        ("clips/hour per replica", _fmt(e.clips_per_hour_per_replica)),
        ("clips/hour per node", _fmt(e.clips_per_hour_per_node)),
        ("cost per clip (USD)", _fmt(e.usd_per_clip, 3)),
        ("offer", f"{e.offer.id} ${e.offer.usd_per_hour:.2f}/h" if e.offer else "-"),
        ("load time (s)", _fmt(e.load_s, 0)),
    ]
    if e.breakdown:
        b = e.breakdown
        rows.append(
            (
                "per step: compute / comm (s)",
                f"{b.linear_s + b.attention_s:.3f} / {b.ulysses_s + b.tp_s + b.ring_s + b.hsdp_s + b.cfg_s:.3f}",
            )
        )
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


@app.command()
def plans(
    model: ModelOpt = "cosmos3-super",
    gpu: GpuOpt = "H200",
    gpus: Annotated[int, typer.Option(help="GPUs on the node the plans must use")] = 8,
    steps: StepsOpt = None,
    profile: ProfileOpt = None,
    capacity: CapacityOpt = "on-demand",
    sort: Annotated[str, typer.Option(help="latency | cost | throughput")] = "latency",
    show_all: Annotated[bool, typer.Option("--all", help="list every plan, refused ones one per line")] = False,
    limit: Annotated[int, typer.Option(help="valid plans shown in the table (without --all)")] = 25,
    as_json: JsonOpt = False,
) -> None:
    """Every plan vLLM-Omni 0.30 would accept on GPUS GPUs of one node, and why the others are refused."""
    from worldtune.tools.plans.estimate import list_plans

    keys = {
        "latency": lambda e: e.latency_s,
        "cost": lambda e: e.usd_per_clip if e.usd_per_clip is not None else float("inf"),
        "throughput": lambda e: -(e.clips_per_hour_per_node or 0.0),
    }
    if sort not in keys:
        raise fail(f"sort={sort!r} is not valid: expected one of {', '.join(keys)}", as_json)
    try:
        found = list_plans(model=model, gpu=gpu, gpus=gpus, steps=steps, profile_path=profile, capacity=capacity)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    valid = sorted((e for e in found if e.valid), key=keys[sort])
    refused = [e for e in found if not e.valid]
    if as_json:
        emit_json([e.model_dump(mode="json") for e in valid + refused])
        return
    shown = valid if show_all else valid[:limit]
    title = f"{model}: {len(valid)} valid plans on {gpus}x{gpu.upper()} (sorted by {sort})"
    table = Table(
        title=title,
        caption="latency s: a client's end-to-end time of one sync request (goals are judged on "
        "it); server s: the server's generation time (vLLM-Omni's stage time); fixed s is the server's",
    )
    for name in (
        "plan",
        "repl x GPUs",
        "latency s",
        "±1σ",
        "server s",
        "s/step",
        "fixed s",
        "GiB/GPU",
        "clips/h/repl",
        "clips/h/node",
        "$/clip",
        "offer",
    ):
        table.add_column(name, justify="left" if name in ("plan", "offer") else "right")
    for e in shown:
        marked = ("*" if e.relies_on_assumed else "") + ("\u2020" if e.unmeasured_families else "")
        sigma = f"{e.latency_sigma:.0%}" if e.latency_sigma is not None else "-"
        table.add_row(
            str(e.plan) + marked,
            f"{e.replicas} x {e.world_size}",
            _fmt(e.latency_s),
            sigma,
            _fmt(e.server_s),
            _fmt(e.per_step_s, 3),
            _fmt(e.fixed_s),
            _fmt(e.memory_gib_per_gpu),
            _fmt(e.clips_per_hour_per_replica),
            _fmt(e.clips_per_hour_per_node),
            _fmt(e.usd_per_clip, 3),
            e.offer.id if e.offer else "-",
        )
    console.print(table)
    if len(shown) < len(valid):
        console.print(f"... {len(valid) - len(shown)} more valid plans (--all lists them, --json gives every field)")
    if refused:
        console.print(f"\n[bold]{len(refused)} plans refused[/]")
        if show_all:
            for e in refused:
                console.print(f"  {e.plan}: {e.reason}")
        else:
            by_rule: dict[str, list[Any]] = {}
            for e in refused:
                by_rule.setdefault(e.rule, []).append(e)
            for rule, items in sorted(by_rule.items()):
                console.print(f"  {rule} ({len(items)}), e.g. {items[0].plan}: {items[0].reason}")
    console.print(
        "[dim]±1σ: the latency's relative uncertainty under the profile's prior (Profile.uncertainty: fitted 15%, "
        "assumed 50%, ...), a model, not a measurement; * marks a plan whose uncertainty is mostly assumed terms "
        "(estimate --plan P names them; see the profile's 'assumed' list); \u2020 a plan with no measured cell of one "
        "of its families on this GPU (tensor parallel, FP8, a backend, ...: --json's unmeasured_families)[/]"
    )


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"worldtune {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Find the cheapest way to serve Cosmos 3 on vLLM-Omni that meets a goal, with evidence."""


def main() -> None:
    """Entry point of the `worldtune` script."""
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    try:
        app()
    except WorldtuneError as exc:  # a refusal a command did not catch itself: one line, never a traceback
        err_console.print(f"[bold red]error:[/] {escape(describe(exc))}")
        raise SystemExit(EXIT_INVALID) from None


if __name__ == "__main__":
    main()
