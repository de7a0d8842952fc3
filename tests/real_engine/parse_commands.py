"""Run by the REAL ENGINE's Python (scripts/engine-setup.sh's venv), not worldtune's: vLLM-Omni 0.30.0's own
argument parser and checks on every command line worldtune rendered.

stdin: a JSON list of {"id": str, "argv": [...], "world_size": int}; each argv starts at `vllm serve`.
stdout (last line): a JSON list of {"id", "ok", "error", "world_size"}: the parser's verdict on each.

What runs is what `vllm serve ... --omni` runs before it starts anything (vllm_omni/entrypoints/cli/main.py): the
parser built the same way (TrackingArgumentParser, the `serve` subcommand of vllm_omni.entrypoints.cli.serve),
`parse_args`, `OmniServeCommand.validate`, then the diffusion parallel config the engine builds from the parsed
values (`DiffusionParallelConfig.from_stage_overrides`, as vllm_omni/config/config_factory.py does), whose
world size must equal the GPUs the replica is given. An unknown flag is argparse's error, kept by name.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    import vllm_omni.entrypoints.cli.serve as serve
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm_omni.utils.tracking_parser import TrackingArgumentParser

    cli_env_setup()
    serve._ensure_vllm_platform()
    parser = TrackingArgumentParser(description="vLLM OMNI CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands: dict[str, object] = {}
    for cmd in serve.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        commands[cmd.name] = cmd
    return parser, commands


class _ParseError(Exception):
    pass


def check(parser: argparse.ArgumentParser, commands: dict[str, object], argv: list[str], world: int) -> str | None:
    from vllm_omni.diffusion.data import DiffusionParallelConfig

    if argv[:2] != ["vllm", "serve"]:
        return f"not a `vllm serve` command: {argv[:2]}"
    err = io.StringIO()

    def fail(message: str) -> None:  # argparse calls parser.error -> exit(2); keep its message instead
        raise _ParseError(message)

    try:
        with contextlib.redirect_stderr(err):
            parser.error = fail  # type: ignore[method-assign]
            for action in parser._subparsers._group_actions if parser._subparsers else []:
                for sub in getattr(action, "choices", {}).values():
                    sub.error = fail
            args = parser.parse_args(argv[1:])
        commands[args.subparser].validate(args)  # type: ignore[attr-defined]
        config = DiffusionParallelConfig.from_stage_overrides(vars(args))
    except (_ParseError, ValueError, TypeError, AssertionError) as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    except SystemExit as exc:
        return f"SystemExit {exc.code}: {err.getvalue().strip()[-500:]}"
    if int(config.world_size) != world:
        return f"world size {config.world_size} from the parsed flags, but the replica is given {world} GPU(s)"
    return None


def main() -> None:
    items = json.load(sys.stdin)
    began = time.monotonic()
    parser, commands = build_parser()
    built = time.monotonic() - began
    out = [
        {"id": it["id"], "ok": (e := check(parser, commands, it["argv"], it["world_size"])) is None, "error": e}
        for it in items
    ]
    print(
        f"parser built in {built:.1f} s, {len(items)} commands checked in {time.monotonic() - began - built:.1f} s",
        file=sys.stderr,
    )
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
