"""The ``[local-central]`` table: which query, at which ε, measured how many times.

Only pydantic is needed to check it; the simulation it describes is in
:mod:`dpaudit.local_central.simulate`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpaudit.sections import Table


class LocalCentralSection(Table):
    """``[local-central]``: a mean of bits or a histogram, local versus central DP.

    ``query`` is ``"mean"`` (n bits, ``share`` of them 1; binary randomised response
    against the Laplace mechanism on the count) or ``"histogram"`` (n records in ``k``
    bins, by ``frequencies`` or Zipf; ``randomiser`` k-RR or optimised unary encoding
    against Laplace per bin). ``repeats`` releases per ε measure the error; ``trials``
    runs per neighbouring input measure each randomiser's ε lower bound.
    """

    query: Literal["mean", "histogram"]
    n: Annotated[int, Field(ge=10, le=10_000_000)] = 10_000
    epsilons: list[Annotated[float, Field(gt=0.0, le=20.0)]] = Field(
        default_factory=lambda: [0.5, 1.0, 2.0], min_length=1, max_length=20
    )
    repeats: Annotated[int, Field(ge=20, le=1_000_000)] = 1_000
    trials: Annotated[int, Field(ge=100, le=10_000_000)] = 20_000
    share: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    k: Annotated[int, Field(ge=2, le=1_000)] | None = None
    frequencies: list[Annotated[float, Field(ge=0.0)]] | None = None
    randomiser: Literal["k-rr", "unary-encoding"] | None = None
    threshold: Literal["split", "bonferroni"] = "split"

    @model_validator(mode="after")
    def _keys_fit_the_query(self) -> LocalCentralSection:
        if self.query == "mean":
            for key in ("k", "frequencies", "randomiser"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' is a parameter of query = 'histogram', not 'mean'")
        else:
            if self.share is not None:
                raise ValueError("'share' is a parameter of query = 'mean', not 'histogram'")
            if self.k is None:
                raise ValueError("query = 'histogram' needs 'k', the number of bins")
            if self.frequencies is not None and (
                len(self.frequencies) != self.k or sum(self.frequencies) <= 0
            ):
                raise ValueError(
                    f"'frequencies' must be {self.k} non-negative numbers with a positive sum"
                )
        if len(set(self.epsilons)) != len(self.epsilons):
            raise ValueError(f"'epsilons' must be different values; got {self.epsilons}")
        return self


def measured_mechanisms(section: LocalCentralSection) -> tuple[tuple[str, str], ...]:
    """The mechanisms measured at every ε, as (side, name): the local randomiser and the
    central Laplace mechanism. Each one's ε lower bound enters the verdict against the ε
    it runs with; the kind's ``comparisons`` counts them and its summary spends them."""
    local = "randomised response" if section.query == "mean" else section.randomiser or "k-rr"
    return (("local", local), ("central", "central Laplace"))
