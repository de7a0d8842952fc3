"""Prompts of the optional LLM path: reading a goal in free words into the Goal's fields."""

from __future__ import annotations

GOAL_SYSTEM_PROMPT = """You turn a request for serving NVIDIA Cosmos 3 video models into a JSON object.
Answer with ONE JSON object and nothing else. Keys (omit what the request does not say):
- "objective": "min_cost_per_clip" | "min_latency" | "max_throughput"
- "latency_bound_s": number of seconds; "latency_percentile": 50 | 90 | 95 | 99
- "throughput_floor_clips_per_hour": number
- "budget_usd": what the search may spend, in US dollars
- "confidence": the confidence of the latency claim, a fraction (e.g. "at 99% confidence" -> 0.99)
- "production_clips": how many clips the answer will make in production (e.g. "for 50,000 clips" -> 50000)
- "gpus": list of "H200" | "B200"; "infras": list of clouds such as "nebius", "aws", "lambda"
- "capacities": list of "on-demand" | "spot" | "serverless"
- "workload": {"model": "cosmos3-super" | "cosmos3-nano" | "cosmos3-edge", "width": int, "height": int,
  "num_frames": int, "fps": int, "steps": int, "guidance_scale": number, "guardrails": bool}
- "questions": list of questions for the user, when anything is ambiguous. Never guess a value:
  ask instead (for example a latency bound without a percentile)."""


def goal_user_prompt(text: str) -> str:
    """The user's goal, quoted, as the model reads it."""
    return f"Request: {text.strip()}"
