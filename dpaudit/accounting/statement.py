"""What ``dpaudit account`` states: a DP-SGD run's or an equation's guarantee, assembled.

:func:`account_dpsgd` gathers every accountant upper bound of one DP-SGD run (ε(δ) by PLD
and RDP, the μ bracket, ρ for full batch, GDP identification on request) with the reason
for each value that is not finite; :func:`account_equation` identifies, measures and
amplifies a guarantee given as a privacy–utility equation σ = g(ε, δ). Both return a
frozen result object whose ``to_dict`` is what ``dpaudit account --json`` prints. The
command line only parses its options and prints the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dpaudit.accounting import _accountants
from dpaudit.theory import MuBracket, full_batch_zcdp
from dpaudit.theory.equations import (
    AmplifiedGuarantee,
    EquationIdentification,
    amplify_by_mixing,
    equation_from_name,
    identify_equation,
)
from dpaudit.theory.identification import GDPIdentification, identify_bracket

__all__ = ["DpsgdAccount", "EquationAccount", "account_dpsgd", "account_equation", "json_finite"]

ACCOUNTANTS: tuple[Literal["pld", "rdp"], ...] = ("pld", "rdp")


@dataclass(frozen=True)
class DpsgdAccount:
    """Every accountant upper bound of T steps of Poisson-subsampled DP-SGD (q = 1: DP-GD).

    Attributes:
        noise_multiplier, sampling_rate, steps, delta: the run (σ, q, T) and δ of ε(δ).
        epsilon: ε at ``delta`` per accountant (``"pld"``, ``"rdp"``); may be ∞.
        mu_bracket: the GDP measurement of the PLD profile.
        rho: ρ = T/(2σ²) of full-batch DP-GD (Bun, Steinke 2016, Prop. 1.6 and Lemma 2.3);
            None for a subsampled run, which has no ρ of this form.
        epsilon_reason: per accountant, why its ε is infinite or where it came from
            instead of a PLD (a finding about the run, never an error).
        identification: whether the run is exactly μ-GDP (Liu et al. 2022), when asked.
    """

    noise_multiplier: float
    sampling_rate: float
    steps: int
    delta: float
    epsilon: dict[str, float]
    mu_bracket: MuBracket
    rho: float | None
    epsilon_reason: dict[str, str]
    identification: GDPIdentification | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``dpaudit account --json`` prints it (infinities kept: see
        :func:`json_finite`)."""
        out: dict[str, Any] = {
            "noise_multiplier": self.noise_multiplier,
            "sampling_rate": self.sampling_rate,
            "steps": self.steps,
            "delta": self.delta,
            "epsilon": dict(self.epsilon),
            "mu_bracket": {
                k: v for k, v in self.mu_bracket.to_dict().items() if k not in ("grid", "mu_values")
            },
            "rho": self.rho,
        }
        if self.epsilon_reason:
            out["epsilon_reason"] = dict(self.epsilon_reason)
        if self.identification is not None:
            out["identification"] = {
                k: v for k, v in self.identification.to_dict().items() if k != "bracket"
            }
        return out


def account_dpsgd(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float = 1e-5,
    identify: bool = False,
) -> DpsgdAccount:
    """The accountant upper bounds of one DP-SGD run, each with its reason when infinite.

    Args:
        noise_multiplier: σ, noise std over the clipping norm.
        sampling_rate: q, the Poisson rate per step.
        steps: T noisy updates.
        delta: δ of ε(δ).
        identify: also decide whether the run is exactly μ-GDP.

    Raises:
        DpauditError: an invalid σ, q, T or δ (the accountants' own checks).
    """
    eps: dict[str, float] = {
        kind: _accountants.dpsgd_epsilon(
            noise_multiplier=noise_multiplier,
            sampling_rate=sampling_rate,
            steps=steps,
            delta=delta,
            accountant=kind,
        )
        for kind in ACCOUNTANTS
    }
    event = _accountants.dpsgd_event(
        noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps
    )
    bracket = _accountants.mu_bracket(event)
    # Full batch is T compositions of the Gaussian mechanism; a subsampled one has no ρ.
    rho = (
        full_batch_zcdp(noise_multiplier=noise_multiplier, steps=steps)
        if sampling_rate == 1.0 and noise_multiplier > 0
        else None
    )
    identification = identify_bracket(bracket, source="this DP-SGD run") if identify else None
    # An infinite ε is a finding about the run, stated with its reason, never an error;
    # so is a run too weakly noised for any PLD, whose ε comes from elsewhere.
    reasons: dict[str, str] = {
        kind: (
            "no finite ε at this δ: δ is below the probability the accountant gives to an "
            "infinite privacy loss"
            if kind == "pld"
            else "no finite ε at this δ: every RDP order is infinite"
        )
        for kind, value in eps.items()
        if math.isinf(value)
    }
    if _accountants.pld_discretization(event) is None:
        reasons["pld"] = (
            f"no PLD of this run fits (its privacy losses span more than "
            f"{_accountants.MAX_PLD_SPAN:.0e} nats): the value is the smaller of the RDP "
            "ε and the exact ε of the same run without subsampling, both upper bounds"
        )
    return DpsgdAccount(
        noise_multiplier=float(noise_multiplier),
        sampling_rate=float(sampling_rate),
        steps=int(steps),
        delta=float(delta),
        epsilon=eps,
        mu_bracket=bracket,
        rho=rho,
        epsilon_reason=reasons,
        identification=identification,
    )


@dataclass(frozen=True)
class EquationAccount:
    """A guarantee σ = g(ε, δ) read as GDP, and optionally amplified by mixing.

    Attributes:
        identification: naive and refined profiles, GDP identification, μ bracket
            (:func:`dpaudit.theory.equations.identify_equation`).
        amplified: the post-processing by a uniform draw w.p. ``mix``
            (:func:`dpaudit.theory.equations.amplify_by_mixing`), when asked.
    """

    identification: EquationIdentification
    amplified: AmplifiedGuarantee | None = None

    @property
    def figure_top(self) -> float:
        """The largest μ a figure of the profiles shows: 40 when the equation is not GDP,
        else four times its bracket's lower end (at least 4)."""
        ident = self.identification
        return 40.0 if not ident.gdp else 4.0 * max(1.0, ident.refined.bracket.low)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``dpaudit account --equation --json`` prints it."""
        out: dict[str, Any] = self.identification.to_dict()
        if self.amplified is not None:
            out["amplified"] = self.amplified.to_dict()
        return out


def account_equation(
    name: str,
    parameters: dict[str, float],
    *,
    mix: float | None = None,
    base_dir: str | Path | None = None,
) -> EquationAccount:
    """Identify (and, with ``mix``, amplify) the equation ``name`` with ``parameters``.

    Args:
        name: ``sgd``, ``laplace``, ``icea`` or ``pkg.module:function``.
        parameters: the equation's parameters (omitted ones take the paper's values).
        mix: the probability p of a uniform draw to post-process by (needs field_size).
        base_dir: where a ``pkg.module:function`` equation is looked up.

    Raises:
        DpauditError: an unknown equation or parameter, or an invalid value.
    """
    eq = equation_from_name(name, parameters, base_dir=base_dir)
    ident = identify_equation(eq)
    amplified = amplify_by_mixing(eq, mix=mix) if mix is not None else None
    return EquationAccount(identification=ident, amplified=amplified)


def json_finite(value: Any) -> Any:
    """``value`` with every infinite or NaN float replaced by None (JSON has no infinity:
    an unbounded value is null, and its reason says why)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_finite(v) for v in value]
    return value
