"""The time to a verified answer the record reports (agent/state.answer_seconds): rounds one after another, the
verifications of one round at once."""

from __future__ import annotations

from worldtune.agent.state import Outcome, answer_seconds
from worldtune.policies.search import Measurement


def _outcome(key: str, seconds: float, round_: int, alongside: bool = False) -> Outcome:
    m = Measurement(key=f"o|{key}", kind="probe", per_step_s=1.0, fixed_s=1.0)
    return Outcome(measurement=m, deployment_id="wt-1", model_s=seconds, round=round_, alongside=alongside)


def test_a_probe_alongside_the_first_is_within_its_round_not_after_it() -> None:
    """At --parallel 1, two verifications asked by one round count one after another (a round asks for at most
    that many at once), except a probe on a node launched for the claim's run (Action.rides): it ran at once with
    the round's first on its own node, so the round lasts the longer of the two."""
    first, rider, claim = _outcome("a", 1200.0, 0), _outcome("b", 1300.0, 0, alongside=True), _outcome("a", 1800.0, 2)
    assert answer_seconds([first, rider, claim], parallel=1) == 1300.0 + 1800.0
    plain = rider.model_copy(update={"alongside": False})
    assert answer_seconds([first, plain, claim], parallel=1) == 1200.0 + 1300.0 + 1800.0
    assert answer_seconds([first, plain], parallel=2) == 1300.0
