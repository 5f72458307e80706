"""Anytime-valid ε lower bounds from the k-candidate identification game, played in rounds.

The sequential counterpart of :func:`dpaudit.bounds.identification_epsilon_lower_bound`:
after every round of games an anytime-valid LOWER limit on the success probability gives an
ε lower bound that holds over every round at once, so an audit may look after each round
and stop when a violation is proven, a target is certified or the games run out
(:mod:`dpaudit.reconstruction.sequential` wires it into the ``reconstruction`` kind). The
game has no threshold to choose, so every round is counted, the first included.

**The confidence sequence.** Let F_t = 1 when game t is lost. The one-sided beta-binomial
mixture martingale of :func:`dpaudit.sequential.log_mixture_martingale` against a failure
rate f, with its prior truncated to alternatives q ≤ f, multiplies per game the factor
(q/f)^F_t ((1 − q)/(1 − f))^(1 − F_t). If game t's conditional failure probability
φ_t given the past is ≥ f, that factor's conditional mean is
(1 − q)/(1 − f) − φ_t·((1 − q)/(1 − f) − q/f) ≤ 1 (the bracket is ≥ 0 for q ≤ f), so the
mixture is a nonnegative supermartingale with M_0 = 1, and by Ville's inequality it ever
reaches 1/α with probability ≤ α (Ville 1939, p. 100; Howard, Ramdas, McAuliffe, Sekhon
2021, Ann. Statist. 49(2), Eq. (6) and Prop. 7). :func:`dpaudit.sequential.rate_upper_limit`
at ``level`` = 1 − α is u_n = sup{f : M_n(f) < 1/α}; so P(∃ n: u_n < f) ≤ α for every f
below all the φ_t, and ℓ_n = 1 − min_{m ≤ n} u_m is a lower limit on the success
probability valid over every round at once.

**Why the claim fixes such an f.** Under (ε, δ)-DP for replace-one neighbours, every
attacker's success probability in the k-candidate game is at most
p*(ε) = (e^ε + (k − 1)δ)/(e^ε + k − 1) (:func:`dpaudit.theory.identification_success_bound`),
whatever the candidates and the network are. The games of one round share one network and
the past games may tell something about it, but the bound holds for every network, and each
game draws fresh noise, candidates and target: a game's success probability given the past
is therefore ≤ p*(ε), i.e. φ_t ≥ 1 − p*(ε) for every t. Hence P(∃ n: ℓ_n > p*(ε)) ≤ α.

**The map to ε** is the fixed bound's (:func:`dpaudit.bounds.identification_epsilon_lower_bound`):
g(p) = ln((k − 1)(p − δ)/(1 − p)), floored at 0. g is strictly increasing on (δ, 1) (its
numerator increases and its denominator decreases in p) and g(p*(ε)) = ε (solve
p(e^ε + k − 1) = e^ε + (k − 1)δ for ε). So g(ℓ_n) > ε implies ℓ_n > p*(ε), and
P(∃ n: g(ℓ_n) > ε) ≤ α for every ε the mechanism satisfies at δ: the running bound is an ε
lower bound at level 1 − α over every round, and stopping at any round, for any reason,
keeps that level. A sequential verdict therefore takes the same budget share as the fixed
bound of the same comparison (one comparison: the game's).

**The prior** is fixed before any game: it is centred on the success probability the first
stopping goal needs (p* at the smaller of the accountant's ε and the target; chance 1/k when
there is neither), with the concentration :func:`dpaudit.sequential.tuned_concentration`
gives for ``tuned_trials`` games. Only power depends on it, never validity.

Pure functions of counts and numbers (numpy/scipy, no torch, no I/O).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dpaudit.bounds import EpsilonBound, identification_epsilon_lower_bound
from dpaudit.errors import DpauditError, check_in_interval, check_integer
from dpaudit.sequential import SequentialRule, rate_upper_limit, tuned_concentration
from dpaudit.stats import ConfidenceInterval
from dpaudit.theory import check_candidates, identification_success_bound

__all__ = [
    "GAME_SEQUENTIAL_METHOD",
    "GameOutcome",
    "GamePoint",
    "GameTest",
    "epsilon_from_success",
    "fixed_plan",
    "game_bound",
    "game_rounds",
    "success_lower_limit",
]

#: The method label of the sequential game bound.
GAME_SEQUENTIAL_METHOD = "beta-binomial-mixture-cs-identification"

# ------------------------------------------------------------------- the statistics


def epsilon_from_success(success_low: float, *, candidates: int, delta: float) -> float:
    """g(p) = ln((k − 1)(p − δ)/(1 − p)), floored at 0: the ε a lower limit ``p`` on the
    success probability of the k-candidate game proves (the inverse of
    :func:`dpaudit.theory.identification_success_bound` in ε, strictly increasing in p).

    ``p ≤ δ`` proves nothing (0); ``p = 1`` cannot come from finitely many games, and is
    returned as ``inf`` rather than divided by zero.
    """
    k = check_candidates(candidates)
    p = check_in_interval("success_low", success_low, 0.0, 1.0)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    if p <= d:
        return 0.0
    if p >= 1.0:
        return math.inf
    return max(0.0, math.log((k - 1) * (p - d) / (1.0 - p)))


def success_lower_limit(
    correct: int, games: int, *, level: float, prior_mean: float, prior_concentration: float
) -> float:
    """The anytime-valid lower limit ℓ_n = 1 − u_n on the success probability after
    ``correct`` wins in ``games`` games, u_n the upper limit of the FAILURE rate
    (:func:`dpaudit.sequential.rate_upper_limit`, a one-sided mixture martingale at
    ``level``; ``prior_mean`` is the prior's mean SUCCESS probability). With probability
    ≥ ``level`` the success probability is ≥ ℓ_n at every n at once. ``games = 0`` and no
    win give exactly 0."""
    games = check_integer("games", games, low=0)
    correct = check_integer("correct", correct, low=0, high=games)
    failures = games - correct
    return 1.0 - rate_upper_limit(
        failures,
        games,
        level=level,
        prior_mean=1.0 - prior_mean,
        prior_concentration=prior_concentration,
    )


@dataclass(frozen=True)
class GamePoint:
    """The state of the sequential game after one round.

    Attributes:
        round: the round's index (every round is counted, round 0 included).
        trials: games played so far.
        correct: games won so far.
        success_low: the anytime-valid lower limit on the success probability (running
            maximum: non-decreasing over rounds).
        value: the ε lower bound it gives (non-decreasing over rounds).
        decision: ``continue``, ``violation``, ``target`` or ``cap``.
    """

    round: int
    trials: int
    correct: int
    success_low: float
    value: float
    decision: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _prior_success(rule: SequentialRule, candidates: int) -> float:
    """The prior's mean success probability: p* at the first goal that stops the test
    (fixed before any game; kept off 0 and 1)."""
    goals = [g for g in (rule.upper, rule.target) if g is not None and math.isfinite(g)]
    if not goals:
        return 1.0 / candidates
    p = identification_success_bound(epsilon=min(goals), delta=rule.delta, candidates=candidates)
    return min(max(p, 1e-6), 1.0 - 1e-6)


def _decide(value: float, rule: SequentialRule, last: bool) -> str:
    # A violation first, as the gate reads it; then a certified target; then the cap.
    if rule.upper is not None and value > rule.upper:
        return "violation"
    if rule.target is not None and value >= rule.target:
        return "target"
    return "cap" if last else "continue"


class GameTest:
    """The sequential game fed one round of wins/losses at a time.

    ``rule.parameter`` must be ``"epsilon"``: the game bounds ε (at ``rule.delta``). The
    success limit is taken at ``rule.level`` itself: one rate and one test, so there is no
    union bound and ``rule.target_share`` (the threshold tests' split of 1 − level between
    their rate limits and a target's e-process) does not apply.
    """

    def __init__(self, rule: SequentialRule, *, candidates: int) -> None:
        if rule.parameter != "epsilon":
            raise DpauditError(
                f"the identification game bounds epsilon; got parameter {rule.parameter!r}"
            )
        self.rule = rule
        self.candidates = check_candidates(candidates)
        self.prior_success = _prior_success(rule, self.candidates)
        self.concentration = tuned_concentration(rule.tuned_trials, rule.level)
        self.round = -1
        self.games = self.correct = 0
        self.success_low = 0.0

    def add(self, correct: Any, *, last: bool = False) -> GamePoint:
        """Count one more round (``correct``: 1 per game won, 0 per game lost); ``last``:
        it is the last round allowed (the cap)."""
        won = np.asarray(correct)
        self.round += 1
        self.games += int(won.size)
        self.correct += int(np.count_nonzero(won))
        # Running maximum: the intersection of the sequence so far (the same event).
        self.success_low = max(
            self.success_low,
            success_lower_limit(
                self.correct,
                self.games,
                level=self.rule.level,
                prior_mean=self.prior_success,
                prior_concentration=self.concentration,
            ),
        )
        value = epsilon_from_success(
            self.success_low, candidates=self.candidates, delta=self.rule.delta
        )
        return GamePoint(
            self.round,
            self.games,
            self.correct,
            self.success_low,
            value,
            _decide(value, self.rule, last),
        )


@dataclass(frozen=True)
class GameOutcome:
    """The sequential game run over stored rounds up to its first decision.

    Attributes:
        decision: ``violation``, ``target``, ``cap`` or ``continue``.
        rounds: rounds used.
        trials: games used.
        path: one :class:`GamePoint` per round used.
        rule: the level, δ, accountant's ε (``upper``) and target.
        candidates: k.
        prior_success: the prior's mean success probability.
    """

    decision: str
    rounds: int
    trials: int
    path: list[GamePoint]
    rule: SequentialRule
    candidates: int
    prior_success: float


def game_rounds(
    rounds: Sequence[Any], rule: SequentialRule, *, candidates: int, last_round: int
) -> GameOutcome:
    """Feed stored rounds (each an array of wins, 1, and losses, 0) in order; stop at the
    first round whose decision is not ``"continue"``. A deterministic function of the
    rounds given; rounds after the decision are never read.

    Raises:
        DpauditError: no round given.
    """
    if not rounds:
        raise DpauditError("A sequential game needs at least one round.")
    test = GameTest(rule, candidates=candidates)
    path: list[GamePoint] = []
    for r, won in enumerate(rounds):
        path.append(test.add(won, last=r >= last_round))
        if path[-1].decision != "continue":
            break
    return GameOutcome(
        decision=path[-1].decision,
        rounds=len(path),
        trials=path[-1].trials,
        path=path,
        rule=rule,
        candidates=test.candidates,
        prior_success=test.prior_success,
    )


def game_bound(result: GameOutcome) -> EpsilonBound:
    """The :class:`~dpaudit.bounds.EpsilonBound` the sequential game stopped with
    (method ``beta-binomial-mixture-cs-identification``, valid at ``rule.level`` over every
    round at once)."""
    last = result.path[-1]
    return EpsilonBound(
        value=last.value,
        confidence_level=result.rule.level,
        delta=result.rule.delta,
        method=GAME_SEQUENTIAL_METHOD,
        threshold="nearest-candidate",
        validity="rigorous-multi-run",
        counts={"correct": last.correct, "trials": last.trials, "candidates": result.candidates},
        details={
            "sequential": True,
            "rounds": result.rounds,
            "stopped_because": result.decision,
            "success_rate": last.correct / last.trials,
            "success_rate_lower": last.success_low,
            "success_interval": list(ConfidenceInterval(last.success_low, 1.0)),
            "chance": 1.0 / result.candidates,
            "limits": (
                "one-sided beta-binomial mixture confidence sequence for the failure rate "
                "(1 - success), valid over every round at once (Robbins 1970; Howard et al. "
                "2021, Ann. Statist. 49(2)), mapped to epsilon by the identification bound "
                "(increasing in the success probability)"
            ),
        },
    )


# ------------------------------------------------- the fixed design, for comparison


def _reaches(won: int, games: int, goal: float, result: GameOutcome) -> bool:
    """Whether the fixed design's Clopper–Pearson bound at ``won`` of ``games`` reaches the
    goal (exceeds the accountant's ε for a violation; reaches the target otherwise)."""

    bound = identification_epsilon_lower_bound(
        won,
        games,
        candidates=result.candidates,
        delta=result.rule.delta,
        confidence_level=result.rule.level,
    )
    return bound.value > goal if result.decision == "violation" else bound.value >= goal


def _critical_count(games: int, goal: float, result: GameOutcome) -> int | None:
    """The fewest wins of ``games`` whose fixed bound reaches the goal (the bound increases
    in the wins); None when even ``games`` wins do not."""
    if not _reaches(games, games, goal, result):
        return None
    low, high = -1, games  # low does not reach, high does
    while high - low > 1:
        mid = (low + high) // 2
        if _reaches(mid, games, goal, result):
            high = mid
        else:
            low = mid
    return high


def _least_games(ok: Callable[[int], bool]) -> int | None:
    """The fewest games n with ``ok(n)`` (doubling, then bisection; None above 10⁸)."""
    high = 1
    while not ok(high):
        high *= 2
        if high > 10**8:
            return None
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def fixed_plan(result: GameOutcome, *, power: float = 0.95) -> dict[str, Any] | None:
    """The fixed design's games for what the sequential test reached, planned at the
    success rate r the used rounds observed (a plug-in: the game's true success
    probability has no closed form). ``trials_per_arm``: the fewest games whose
    Clopper–Pearson bound at the count ⌊r·n⌋ reaches the goal (the accountant's ε for a
    violation, the target otherwise), as :mod:`dpaudit.planning` plans the mechanism kind
    (about even odds of reaching it); ``trials_per_arm_power``: the fewest games that reach
    it with probability ≥ ``power`` under Binomial(n, r) (the same detection probability
    a sequential design is judged by). A rate observed at a sequential stop leans high
    (the test stops on a lucky run), so both plans lean low: the comparison favours the
    fixed design."""
    from scipy import stats

    goal = result.rule.upper if result.decision == "violation" else result.rule.target
    if result.decision not in ("violation", "target") or goal is None:
        return None
    last = result.path[-1]
    rate = last.correct / last.trials

    def detects(n: int) -> bool:
        need = _critical_count(n, goal, result)
        return need is not None and float(stats.binom.sf(need - 1, n, rate)) >= power

    expected = _least_games(lambda n: _reaches(math.floor(rate * n), n, goal, result))
    powered = _least_games(detects)
    return {
        "goal": goal,
        "success_rate": rate,
        "basis": "Clopper-Pearson fixed design at the observed success rate (plug-in)",
        "trials_per_arm": expected,
        "trials_saved": None if expected is None else expected - result.trials,
        "power": power,
        "trials_per_arm_power": powered,
        "trials_saved_power": None if powered is None else powered - result.trials,
    }
