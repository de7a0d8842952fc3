"""What a vLLM-Omni server's answer says, read by the benchmark's request loop (tools/bench/runner.py): the kind of
an error (by status and text, as vLLM-Omni 0.30 words them), its message, a JSON body or nothing, and the twin's
engine clock header (a real server sends none).
"""

from __future__ import annotations

from typing import Any

from worldtune.tools.words.bench_spec import CLIENT_TIME_HEADER, DONE_AT_HEADER
from worldtune.tools.words.sample import Sample


def engine_clock(sample: Sample, headers: Any) -> None:
    """The twin's engine clock when the answer was done (model s; a real server sends no such header)."""
    done_at = float_or_none(headers.get(DONE_AT_HEADER))
    if done_at is not None:
        sample.server_done_at_s = done_at
    client = float_or_none(headers.get(CLIENT_TIME_HEADER))
    if client is not None:
        sample.twin_client_s = client


def float_or_none(raw: Any) -> float | None:
    try:
        return float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def json_or_empty(raw: str | None) -> dict[str, Any]:
    import json

    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def error_kind(status: int, text: str) -> str:
    if status == 400 and "guardrail" in text.lower():
        return "guardrail"
    if status >= 500 and "out of memory" in text.lower():  # CUDA's OOM text in vLLM-Omni's 500 (a request's peak)
        return "out_of_memory"
    return {400: "bad_request", 404: "not_found", 503: "unavailable", 504: "server_timeout"}.get(
        status, "server_error" if status >= 500 else f"http_{status}"
    )


def error_message(answer: Any) -> str:
    try:
        body = answer.json()
    except ValueError:
        return str(answer.text)[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if body.get("detail"):
            return str(body["detail"])
    return str(body)[:500]
