"""The cumulative-sum privacy profile of accounting.py equals dp-accounting's loop.

``accounting._fast_pld_delta`` reads the composed PMF once and answers every δ(ε) with
a binary search; dp-accounting's ``get_delta`` walks the whole loss support per call.
They must agree bit for bit (so μ brackets, and the golden upper bounds, do not move).
"""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest

from dpaudit import accounting

EVENTS = {
    "poisson q=0.01 σ=1 T=1000": accounting.dpsgd_event(
        noise_multiplier=1.0, sampling_rate=0.01, steps=1000
    ),
    "poisson q=0.25 σ=0.8 T=8": accounting.dpsgd_event(
        noise_multiplier=0.8, sampling_rate=0.25, steps=8
    ),
    "full batch σ=5 T=100": accounting.dpsgd_event(
        noise_multiplier=5.0, sampling_rate=1.0, steps=100
    ),
    "laplace ε=1": accounting.laplace_event(epsilon=1.0),
    "laplace ε=0.5 ×3": accounting.laplace_event(epsilon=0.5, count=3),
}


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_fast_profile_equals_dp_accounting_bit_for_bit(name: str) -> None:
    acc = accounting._accountant(EVENTS[name], "pld")
    fast = accounting._fast_pld_delta(acc)
    eps = np.sort(np.concatenate([np.linspace(0.0, 25.0, 2001), [1e-12, 60.0, np.inf]]))
    want = np.asarray(acc.get_delta(eps), dtype=float)
    if fast is None:  # a PMF this does not read: the profile falls back to get_delta
        pytest.skip(f"{name}: not a dense PMF")
    np.testing.assert_array_equal(fast(eps), want)


def test_profile_uses_the_fast_path_and_keeps_the_bracket(monkeypatch) -> None:
    event = EVENTS["poisson q=0.25 σ=0.8 T=8"]
    acc = accounting._accountant(event, "pld")
    assert accounting._fast_pld_delta(acc) is not None
    fast = accounting.mu_bracket(event)
    # The same bracket through dp-accounting's own loop (get_delta), on this machine: the
    # fast path reads the same sums, so the bracket is identical, not merely close.
    monkeypatch.setattr(accounting._accountants, "_fast_pld_delta", lambda _acc: None)
    loop = accounting.mu_bracket(event)
    assert (fast.low, fast.high) == (loop.low, loop.high)
    # tests/golden/dpsgd-dpsgd.json's μ upper bound, recorded on another CPU: the PLD's FFT
    # differs in the last ulps across CPU kernels and the bracket's bisection on it ends
    # up to ~2.5e-8 apart (1.9793858251206817 here), hence relative 1e-6
    assert fast.high == pytest.approx(1.9793857762531166, rel=1e-6)


def test_non_dp_event_falls_back() -> None:
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.NonPrivateDpEvent())
    assert accounting._fast_pld_delta(acc) is None
