"""Profile paths are allow-listed by who asks, and no refusal ever quotes the file it was pointed at."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from mcp import Client

from worldtune.tools.mcp.server import build_server
from worldtune.tools.plans.profile_paths import PROFILE_DIR_ENV, allowed_profile_path, load_profile
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.profile import Profile

SECRET = "SECRET-MARKER-7f3a9c"
SHIPPED_H200 = Path(__file__).resolve().parents[3] / "policies" / "profiles" / "H200.yaml"


@pytest.fixture(autouse=True)
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "user-profiles"
    folder.mkdir()
    monkeypatch.setenv(PROFILE_DIR_ENV, str(folder))
    return folder


def planted(tmp_path: Path) -> dict[str, Path]:
    """Files a hostile caller might point a profile path at, each holding the secret marker."""
    files = {
        "token.yaml": f"token: {SECRET}\n",  # YAML, not a profile: an unknown key with the secret as value
        "key.yaml": f"{SECRET}: 1\ngpu: H200\n",  # the secret as a key
        "shadow": f"root:{SECRET}:19000:0:99999:7:::\n",  # no profile suffix
        "broken.yaml": f"gpu: [H200\n  {SECRET}\n",  # not YAML: the parser's message quotes the line
        "scalar.yml": f'"{SECRET}"\n',
        "data.json": f'{{"token": "{SECRET}"}}\n',  # not a profile suffix
        # the top-level field only (the profile's `basis:` mapping has a `link_gbps:` key of its own)
        "typed.yaml": SHIPPED_H200.read_text().replace("\nlink_gbps:", f"\nlink_gbps: {SECRET} #", 1),
    }
    out = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        out[name] = tmp_path / name
    return out


def test_cli_reads_any_profile_file_but_never_echoes_one(tmp_path: Path) -> None:
    assert load_profile(str(SHIPPED_H200), "cli").gpu == "H200"
    for name, path in planted(tmp_path).items():
        with pytest.raises(InvalidInput) as caught:
            load_profile(str(path), "cli")
        message = str(caught.value)
        assert SECRET not in message, name
        assert message.startswith(f"profile={str(path)!r} is not valid: "), message
    with pytest.raises(InvalidInput, match=r"invalid link_gbps"):
        load_profile(str(tmp_path / "typed.yaml"), "cli")
    with pytest.raises(InvalidInput, match=r"1 field\(s\) a Profile does not have"):
        load_profile(str(tmp_path / "token.yaml"), "cli")


def test_pseudo_files_folders_and_long_paths_are_refused_for_everyone(tmp_path: Path) -> None:
    for origin in ("cli", "mcp-local", "mcp-http"):
        for bad, words in (
            ("/proc/self/environ", ""),
            ("/dev/null", ""),
            (str(tmp_path), ""),
            ("x" * 5000, "at most 1024 characters"),
            ("a\0b", "NUL"),
            ("", "profile"),
        ):
            with pytest.raises(InvalidInput, match="profile=") as caught:
                allowed_profile_path(bad, origin)
            assert words in str(caught.value)
    with pytest.raises(InvalidInput, match="a profile file, not a /proc"):
        allowed_profile_path("/proc/self/environ", "cli")


def test_mcp_clients_read_only_shipped_and_user_folder_profiles(tmp_path: Path, user_dir: Path) -> None:
    mine = user_dir / "H200-mine.yaml"
    mine.write_text(SHIPPED_H200.read_text())
    outside = tmp_path / "H200-outside.yaml"
    outside.write_text(SHIPPED_H200.read_text())
    assert allowed_profile_path("H200", "mcp-http") == SHIPPED_H200
    assert allowed_profile_path("H200-mine", "mcp-http") == mine.resolve()
    assert allowed_profile_path(str(mine), "mcp-local") == mine.resolve()
    with pytest.raises(InvalidInput, match="remote clients cannot name files on the server"):
        allowed_profile_path(str(mine), "mcp-http")
    for origin in ("mcp-local", "mcp-http"):
        with pytest.raises(InvalidInput, match="profile="):
            allowed_profile_path(str(outside), origin)
        with pytest.raises(InvalidInput, match="profile="):
            allowed_profile_path("/etc/passwd", origin)
    link = user_dir / "escape.yaml"
    os.symlink(outside, link)  # a link out of the folder is judged by where it points
    with pytest.raises(InvalidInput, match="profile="):
        allowed_profile_path(str(link), "mcp-local")
    assert allowed_profile_path(str(outside), "cli") == outside.resolve()


def test_mcp_estimate_refuses_a_server_file_without_echoing_it(tmp_path: Path) -> None:
    token = planted(tmp_path)["token.yaml"]

    async def main() -> list[str]:
        texts = []
        async with Client(build_server(str(tmp_path / "wt.db"), origin="mcp-http")) as client:
            for path in (str(token), "/etc/shadow", "/proc/self/environ", "p" * 5000):
                result = await client.call_tool("estimate", {"plan": "tp8", "profile": path})
                assert result.is_error
                texts.append(" ".join(getattr(c, "text", "") for c in result.content))
            good = await client.call_tool("estimate", {"plan": "tp8", "profile": "H200"})
            assert not good.is_error
        return texts

    for text in anyio.run(main):
        assert SECRET not in text and "profile=" in text and "is not valid: " in text, text


def test_a_profile_loads_as_before() -> None:
    assert Profile.load(SHIPPED_H200).gpu == "H200"


def test_tune_refuses_a_twin_profile_that_is_not_one_before_anything_starts(tmp_path: Path) -> None:
    import subprocess
    import sys

    token = planted(tmp_path)["token.yaml"]
    db = tmp_path / "wt.db"
    worldtune = str(Path(sys.executable).parent / "worldtune")
    out = subprocess.run([worldtune, "tune", "cheapest per clip, p95 under 150 s", "--twin-profile", str(token),
                          "--db", str(db), "--json"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "twin_profile=" in out.stdout and SECRET not in out.stdout + out.stderr
    # was: the fragment written 140 times into the results and checkpoint databases, 30 failed deploys
    assert not db.exists() or (SECRET.encode() not in db.read_bytes())
    assert not list(tmp_path.glob("*checkpoints*"))


def test_deploy_serves_the_first_of_its_twin_profiles_for_the_gpu_type_and_refuses_one_that_is_not_a_profile(
    tmp_path: Path, user_dir: Path
) -> None:
    """Issue 38: the agent hands the deploy tool every rehearsal profile at once (it used to try each in turn and
    match the refusal's text): the tool passes over a profile for another GPU type, serves the first for this one,
    and refuses a file that is not an allowed profile, naming the field and never echoing the file."""
    b200 = Path(__file__).resolve().parents[3] / "policies" / "profiles" / "B200.yaml"
    (user_dir / "b200-truth.yaml").write_text(b200.read_text())
    truth = Profile.load(SHIPPED_H200).model_copy(update={"source": "test: the H200 truth served"})
    (user_dir / "h200-truth.yaml").write_text(truth.model_dump_json())
    token = planted(tmp_path)["token.yaml"]

    async def main() -> tuple[dict[str, object], str]:
        async with Client(build_server(str(tmp_path / "wt.db"), origin="mcp-http")) as client:
            args = {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "time_scale": 1000.0, "confirm": True}
            served = await client.call_tool("deploy", args | {"twin_profiles": ["b200-truth", "h200-truth"]})
            assert not served.is_error, served.content
            deployment = (served.structured_content or {})["deployment"]
            await client.call_tool("teardown", {"deployment_id": deployment["id"], "confirm": True})
            refused = await client.call_tool("deploy", args | {"twin_profiles": [str(token), "h200-truth"]})
            assert refused.is_error
            return deployment, " ".join(getattr(c, "text", "") for c in refused.content)

    deployment, text = anyio.run(main)
    assert str(deployment["twin_profile"]).endswith("h200-truth.yaml"), deployment
    assert "twin_profiles=" in text and SECRET not in text, text
