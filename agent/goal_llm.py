"""The goal parser's optional path: a chat model (LangChain `init_chat_model`, configured by environment settings)
reads text the deterministic parser asks about; its answer goes through the same Goal validation and is shown for
confirmation. Nothing here runs unless $WORLDTUNE_LLM_MODEL is set.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from worldtune.agent.goal_reader import GoalQuestion, ParsedGoal, first_line
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

# Environment settings of the optional LLM path (read only when set).
LLM_MODEL_ENV = "WORLDTUNE_LLM_MODEL"  # e.g. "openai:gpt-4.1" or "anthropic:claude-sonnet-4-5"
LLM_TEMPERATURE_ENV = "WORLDTUNE_LLM_TEMPERATURE"

ChatInvoke = Callable[[list[tuple[str, str]]], Any]


def configured_chat_model() -> Any | None:
    """The chat model the user configured ($WORLDTUNE_LLM_MODEL via LangChain's init_chat_model), or None."""
    name = os.environ.get(LLM_MODEL_ENV, "").strip()
    if not name:
        return None
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise GoalQuestion(
            [f"${LLM_MODEL_ENV}={name} is set but LangChain is not installed: pip install 'worldtune[llm]'"]
        ) from exc
    temperature = float(os.environ.get(LLM_TEMPERATURE_ENV, "0"))
    return init_chat_model(name, temperature=temperature)


def parse_goal_with_llm(
    text: str, chat_model: Any, budget_usd: float | None = None, infras: list[str] | None = None
) -> ParsedGoal:
    """Ask a chat model to fill the Goal's fields; validate them exactly as the parser's; questions pass through."""
    from worldtune.agent.prompts import GOAL_SYSTEM_PROMPT, goal_user_prompt

    reply = chat_model.invoke([("system", GOAL_SYSTEM_PROMPT), ("human", goal_user_prompt(text))])
    content = reply.content if hasattr(reply, "content") else str(reply)
    data = _json_object(content if isinstance(content, str) else json.dumps(content))
    if data is None:
        raise GoalQuestion(["The language model did not answer with a goal; rephrase, or unset " + LLM_MODEL_ENV])
    questions = [str(q) for q in data.pop("questions", []) or []]
    if questions:
        raise GoalQuestion(questions, text)
    workload_changes = data.pop("workload", {}) or {}
    model = str(workload_changes.pop("model", "cosmos3-super"))
    try:
        workload = anchor_workload(model, **workload_changes)
        if budget_usd is not None:
            data["budget_usd"] = budget_usd
        if infras is not None:
            data["infras"] = infras
        goal = Goal.model_validate({**data, "workload": workload})
    except ValueError as exc:
        raise GoalQuestion([f"The goal the language model read is not valid: {first_line(exc)}"], text) from exc
    name = getattr(chat_model, "model_name", None) or getattr(chat_model, "model", None) or type(chat_model).__name__
    return ParsedGoal(goal=goal, source=f"llm:{name}", assumptions=["read by a language model: check it"], text=text)


def _json_object(content: str) -> dict[str, Any] | None:
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if not match:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
