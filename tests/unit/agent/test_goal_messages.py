"""Issue 36.9 and 36.7: a goal that cannot be read says what was read, what conflicts and gives one goal that
reads; the answer of `tune` goes to stdout and its approval question is in words, not a Python dict."""

from __future__ import annotations

import pytest

from worldtune.agent.goal_parser import EXAMPLE_GOAL, parse_goal
from worldtune.agent.goal_reader import GoalQuestion
from worldtune.cli_tune import _print_outcome, approval_lines
from worldtune.tools.words.run_summary import RunOutcome


def questions(text: str) -> str:
    with pytest.raises(GoalQuestion) as asked:
        parse_goal(text)
    said = "\n".join(asked.value.questions)
    assert EXAMPLE_GOAL in said  # every question about unread words gives a goal that reads
    parse_goal(EXAMPLE_GOAL.strip("'"))  # ... and that goal does read
    return said


def test_a_conflicting_bound_names_what_was_read_and_the_conflict() -> None:
    said = questions("p95 under 100 s and p95 over 200 s")
    assert "read so far: p95 <= 100 s" in said and "conflicts with p95 <= 100 s" in said


def test_a_bare_percentile_a_negative_number_and_an_infinite_budget_each_say_why() -> None:
    assert "'p95' needs a bound in seconds" in questions("p95")
    negative = questions("cheapest, at least -3 clips per hour")
    assert "'-3' is negative" in negative  # the rule read the digits; the sign is never dropped silently
    assert "a budget is a finite dollar amount" in questions("p95 under 150 s, budget $inf")
    assert "read so far: nothing" in questions("make it fast")


def test_the_approval_question_is_in_words_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    estimate = {"usd": 249.67, "gpu_hours": 71.33, "budget_usd": 300.0, "deployments": 9, "cold_loads": 9,
                "warm_loads": 7, "answer_hours": 3.1, "parallel": 1, "priced_as": "the offers' prices",
                "forecast": {"usd": 83.79, "answer_hours": 1.0, "runs": 3}, "claim_requests": 59, "claim_lanes": 4,
                "confidence": 0.95}  # fmt: skip
    lines = approval_lines(estimate)
    assert lines[0].startswith("waiting for approval: at most $249.67 (71.33 GPU-h) of the $300.00 budget")
    assert "{" not in "".join(lines) and "59 requests at 95% confidence over 4 lane(s)" in lines[-1]
    _print_outcome(RunOutcome(run_id="tune-x", status="waiting_for_approval", question={"spend_estimate": estimate}))
    out, err = capsys.readouterr()
    assert "waiting for approval: at most $249.67" in out and "worldtune resume tune-x --yes" in out and err == ""
