"""A plain train/test split just works: held-out rows become the attacker's population.

With membership 1 or 0 on every row, ``[target] population_share`` of the non-members (0.5
by default when an attack needs population rows) leaves the audited rows and becomes the
attacker's population, by a seeded random split (:func:`dpaudit.data.split_population`):

- the split is a pure function of the seed, and its parts are disjoint;
- with ``membership_by_coin = true`` which rows stay audited does not depend on their
  membership at all (members leave at the same rate, set aside), so fair coins stay fair;
- an audit that needs population rows (shadow) runs on a train/test CSV, with a note in
  results.json naming the counts;
- ``dpaudit validate`` says what ``dpaudit run`` says when an attack is left short of
  population rows, before anything trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom
from typer.testing import CliRunner

from dpaudit.audit import run_context
from dpaudit.cli import app
from dpaudit.config import load_config
from dpaudit.data import split_population
from dpaudit.errors import DataError
from dpaudit.membership.brought import load_byo_data
from dpaudit.membership.kind import byo_key_data, byo_spec
from dpaudit.membership.schema import population_shortfall
from dpaudit.schemas import validate_results

runner = CliRunner()
N, D = 300, 3
SEED = 6

AUDIT = """
[audit]
name = "split"
kinds = ["membership"]
seed = {seed}
[data]
dataset = "csv:{data}"
label = "y"
[target]
path = "model.skops"
membership = "member"
{target}
[model]
kind = "logistic"
[training]
epochs = 5
batch_size = 8
[membership]
attacks = {attacks}
shadow_models = 2
[gate]
fail_on_violation = false
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """coins.csv: every row 1/0 by a fair coin; split.csv: a 75/25 train/test split; and
    a logistic regression trained on the members of each (the same features)."""
    root = tmp_path_factory.mktemp("split")
    rng = np.random.default_rng(2)
    X = np.round(rng.normal(size=(N, D)), 4)
    y = (X @ np.array([1.0, -1.0, 0.5]) + rng.normal(0, 0.5, N) > 0).astype(int)
    from sklearn.linear_model import LogisticRegression
    from skops.io import dump

    member = {"coins": rng.random(N) < 0.5, "split": np.arange(N) < int(0.75 * N)}
    for name, m in member.items():
        frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(D)])
        frame["y"] = y
        frame["member"] = m.astype(int)
        frame.to_csv(root / f"{name}.csv", index=False)
    # One model serves both files: what is audited here is the split, not the model.
    dump(LogisticRegression().fit(X[member["coins"]], y[member["coins"]]), root / "model.skops")
    return {"root": root, "member": member}


def _write(world, name: str, *, data: str = "coins.csv", attacks: str = '["loss", "shadow"]',
           target: str = "", seed: int = SEED) -> Path:  # fmt: skip
    path = world["root"] / f"{name}.toml"
    path.write_text(AUDIT.format(seed=seed, data=data, attacks=attacks, target=target))
    return path


def _spec(path: Path):
    config = load_config(path)
    return byo_spec(config.section("membership"), run_context(config))


# ------------------------------------------------------------------ the split itself


def test_the_split_is_a_pure_function_of_the_seed_and_disjoint() -> None:
    membership = np.random.default_rng(0).random(1000) < 0.5
    for fair in (True, False):
        first = split_population(membership, share=0.4, seed=3, keep_coins_fair=fair)
        again = split_population(membership, share=0.4, seed=3, keep_coins_fair=fair)
        other = split_population(membership, share=0.4, seed=4, keep_coins_fair=fair)
        for part in ("audited", "population", "set_aside"):
            np.testing.assert_array_equal(getattr(first, part), getattr(again, part))
        assert not np.array_equal(first.population, other.population)
        parts = [first.audited, first.population, first.set_aside]
        joined = np.concatenate(parts)
        assert joined.size == np.unique(joined).size == membership.size  # disjoint, whole
        assert not membership[first.population].any()  # only non-members join the population
        assert membership[first.set_aside].all()
        assert first.population.size > 0


def test_with_fair_coins_which_rows_stay_does_not_depend_on_membership() -> None:
    rng = np.random.default_rng(1)
    membership = rng.random(500) < 0.5
    flipped = ~membership
    a = split_population(membership, share=0.5, seed=9, keep_coins_fair=True)
    b = split_population(flipped, share=0.5, seed=9, keep_coins_fair=True)
    np.testing.assert_array_equal(a.audited, b.audited)
    # the rows that left are the same; only where each went follows its membership
    np.testing.assert_array_equal(
        np.sort(np.concatenate([a.population, a.set_aside])),
        np.sort(np.concatenate([b.population, b.set_aside])),
    )
    np.testing.assert_array_equal(a.population, b.set_aside)


def test_without_coins_every_member_stays_audited() -> None:
    membership = np.arange(400) < 300
    s = split_population(membership, share=0.5, seed=0, keep_coins_fair=False)
    assert s.set_aside.size == 0
    assert np.isin(np.flatnonzero(membership), s.audited).all()
    np.testing.assert_array_equal(
        np.sort(np.concatenate([s.audited, s.population])), np.arange(400)
    )


def test_the_share_of_non_members_that_leave_is_binomial() -> None:
    """Each non-member leaves with probability ``share``, independently: the count lies
    within Bin(n, share)'s central 1 − 1e-6 range (a derived tolerance, not a tuned one)."""
    n, share = 20_000, 0.3
    s = split_population(np.zeros(n, dtype=bool), share=share, seed=12, keep_coins_fair=True)
    low, high = binom.ppf(0.5e-6, n, share), binom.ppf(1 - 0.5e-6, n, share)
    assert low <= s.population.size <= high
    none = split_population(np.zeros(9, bool), share=0.0, seed=1, keep_coins_fair=True)
    assert none.population.size == 0
    assert none.audited.size == 9


@pytest.mark.parametrize("share", [1.0, -0.1])
def test_a_share_outside_zero_one_is_refused(share: float) -> None:
    with pytest.raises(
        DataError, match=rf"^The 'share' parameter must lie in \[0, 1\)\. Got {share}"
    ):
        split_population(np.zeros(3, bool), share=share, seed=0, keep_coins_fair=False)


# ------------------------------------------------------------ on a brought target


@pytest.mark.parametrize(("data", "by_coin"), [("coins.csv", True), ("split.csv", False)])
def test_population_rows_are_drawn_when_an_attack_needs_them(world, data, by_coin) -> None:
    coin = "membership_by_coin = true" if by_coin else ""
    member = world["member"][data.removesuffix(".csv")]
    got = load_byo_data(_spec(_write(world, f"need-{by_coin}", data=data, target=coin)))
    want = split_population(member, share=0.5, seed=SEED, keep_coins_fair=by_coin)
    np.testing.assert_array_equal(got.population, want.population)
    np.testing.assert_array_equal(got.audited, want.audited)
    np.testing.assert_array_equal(got.membership, member[want.audited])
    np.testing.assert_array_equal(got.held_out, want.population)
    assert got.split == {
        "share": 0.5,
        "seed": SEED,
        "non_members": int((~member).sum()),
        "population": int(want.population.size),
        "set_aside": int(want.set_aside.size),
    }
    # Without an attack that needs them, every row stays audited (nothing is drawn).
    plain = load_byo_data(_spec(_write(world, "loss-only", data=data, attacks='["loss"]')))
    np.testing.assert_array_equal(plain.audited, np.arange(N))
    assert plain.population.size == 0
    assert plain.split is None
    assert plain.held_out is None


def test_the_share_is_in_the_units_key_only_when_it_applies(world) -> None:
    def key(path: Path) -> dict:
        config = load_config(path)
        context = run_context(config)
        return byo_key_data(byo_spec(config.section("membership"), context), context)

    assert key(_write(world, "k1"))["target"]["population_share"] == 0.5
    assert "population_share" not in key(_write(world, "k2", attacks='["loss"]'))["target"]
    stated = _write(world, "k3", attacks='["loss"]', target="population_share = 0.25")
    assert key(stated)["target"]["population_share"] == 0.25


def test_an_audit_that_needed_population_rows_now_runs(world) -> None:
    path = _write(world, "runs", data="split.csv")
    run_dir = world["root"] / "run-split"
    result = runner.invoke(app, ["run", str(path), "-q", "-o", str(run_dir)])
    assert result.exit_code == 0, result.output
    data = json.loads((run_dir / "results.json").read_text())
    validate_results(data)
    member = world["member"]["split"]
    want = split_population(member, share=0.5, seed=SEED, keep_coins_fair=False)
    note = (
        f"Every row's membership is 1 or 0 (a train/test split): {want.population.size} of "
        f"the {int((~member).sum())} non-member rows became the attacker's population by a "
        f"seeded random split ([target] population_share = 0.5, seed {SEED}) and are not "
        "audited."
    )
    assert note in data["warnings"]
    assert [t["attack"]["name"] for t in data["tests"]] == ["loss", "shadow"]
    for t in data["tests"]:
        assert t["negatives"] == int((~member).sum()) - want.population.size
        assert t["positives"] == int(member.sum())
        assert t["target"]["population_split"]["population"] == want.population.size
        assert "held_out" in t["target"]["accuracy"]


def test_fair_coins_say_members_were_set_aside(world) -> None:
    path = _write(world, "coins", attacks='["shadow"]', target="membership_by_coin = true")
    run_dir = world["root"] / "run-coins"
    result = runner.invoke(app, ["run", str(path), "-q", "-o", str(run_dir)])
    assert result.exit_code == 0, result.output
    data = json.loads((run_dir / "results.json").read_text())
    want = split_population(world["member"]["coins"], share=0.5, seed=SEED, keep_coins_fair=True)
    assert any(
        w.endswith(
            f"; {want.set_aside.size} member rows were set aside unused at the same rate, so "
            "the audited rows' membership stays fair coins."
        )
        for w in data["warnings"]
    )
    (test,) = data["tests"]
    assert test["negatives"] + test["positives"] == want.audited.size


# ------------------------------------------------ validate says what run would say


def _both(path: Path, run_dir: Path) -> tuple[str, str]:
    checked = runner.invoke(app, ["validate", str(path)])
    ran = runner.invoke(app, ["run", str(path), "-q", "-o", str(run_dir)])
    assert (checked.exit_code, ran.exit_code) == (2, 2), (checked.output, ran.output)
    assert not (run_dir / "units").exists()  # refused before any unit trained
    return " ".join(checked.output.split()), " ".join(ran.output.split())


def test_no_population_left_is_refused_by_validate_as_by_run(world) -> None:
    path = _write(world, "zero", data="split.csv", target="population_share = 0")
    message = (
        "The shadow attack needs at least 2 rows of the attacker's population (it trains "
        "its shadow models on them); this audit leaves 0. [target] population_share = 0 "
        "keeps every row audited: raise it to set a share of the non-member rows aside "
        "for the attacker. Or list attacks that need no population (loss, lira)."
    )
    checked, ran = _both(path, world["root"] / "run-zero")
    assert message in checked
    assert message in ran


def test_a_share_too_small_for_rmia_names_the_counts(world) -> None:
    member = world["member"]["split"]
    share = 0.002
    drawn = split_population(member, share=share, seed=SEED, keep_coins_fair=False)
    assert drawn.population.size == 0  # the premise: 75 non-members, none drawn
    path = _write(world, "tiny", data="split.csv", attacks='["rmia"]',
                  target=f"population_share = {share}")  # fmt: skip
    message = (
        "The rmia attack needs at least 1 row of the attacker's population (its reference "
        "samples z); this audit leaves 0. [target] population_share = 0.002 set 0 of the "
        f"{int((~member).sum())} non-member rows aside for it: raise population_share, or "
        "hold out more rows. Or list attacks that need no population (loss, lira)."
    )
    checked, ran = _both(path, world["root"] / "run-tiny")
    assert message in checked
    assert message in ran


def test_a_stated_share_with_a_population_of_ones_own_is_refused(world) -> None:
    frame = pd.read_csv(world["root"] / "split.csv")
    frame["member"] = frame["member"].astype("Int64")
    frame.loc[frame.index[-10:], "member"] = pd.NA
    frame.to_csv(world["root"] / "own-population.csv", index=False)
    path = _write(world, "own-pop", data="own-population.csv", target="population_share = 0.5")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert (
        "[target] population_share sets a train/test split's held-out rows aside for the "
        "attacker, but 'member' already leaves 10 rows of [data] without a membership (the "
        "attacker's population): remove population_share, or give every row 1 or 0."
    ) in " ".join(result.output.split())


def test_an_own_target_without_population_rows_is_refused_before_training(tmp_path) -> None:
    audit = (
        '[audit]\nname = "own"\nkinds = ["membership"]\n[data]\n'
        'dataset = "sklearn:breast_cancer"\naudited_size = {size}\n{extra}'
        '[membership]\nattacks = ["loss", "shadow"]\nshadow_models = 2\n'
    )
    (tmp_path / "all.toml").write_text(audit.format(size=569, extra=""))
    message = (
        "The shadow attack needs at least 2 rows of the attacker's population (it trains "
        "its shadow models on them); this audit leaves 0. [data] population_size, or a "
        "dataset with more rows than audited_size = 569, gives the attacker rows of its "
        "own. Or list attacks that need no population (loss, lira)."
    )
    checked, ran = _both(tmp_path / "all.toml", tmp_path / "run")
    assert message in checked
    assert message in ran
    (tmp_path / "big.toml").write_text(audit.format(size=500, extra="population_size = 100\n"))
    result = runner.invoke(app, ["validate", str(tmp_path / "big.toml")])
    assert result.exit_code == 2
    assert (
        "The dataset 'sklearn:breast_cancer' has 569 rows, too few for [data] "
        "audited_size = 500 + population_size = 100."
    ) in " ".join(result.output.split())


def test_population_shortfall_lists_the_first_attack_short() -> None:
    assert population_shortfall(["loss", "lira"], 0) is None
    assert population_shortfall(["loss", "auto", "shadow"], 1) == (
        "The shadow attack needs at least 2 rows of the attacker's population (it trains "
        "its shadow models on them); this audit leaves 1."
    )
    assert population_shortfall(["auto"], 0) == (
        "The auto attack needs at least 1 row of the attacker's population (RMIA, one of "
        "its candidates, compares rows with them); this audit leaves 0."
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            'variants = ["plain"]\npopulation_share = 0.5',
            "'population_share' is for a model of your own",
        ),
        ('scores = "s.csv"\npreprocess = "p.skops"', "'preprocess' is for a model dpaudit queries"),
        (
            'path = "m.skops"\nmembership = "member"\npreprocess = "scaler.pkl"',
            "preprocess must be a scikit-learn transformer saved with skops",
        ),
        ('path = "m.skops"\nmembership = "member"\npopulation_share = 1.0', "less than 1"),
    ],
)
def test_bad_new_target_keys(tmp_path: Path, target: str, message: str) -> None:
    (tmp_path / "a.toml").write_text(
        '[audit]\nname = "a"\nkinds = ["membership"]\n[data]\ndataset = "sklearn:wine"\n'
        f"[target]\n{target}\n[membership]\n"
    )
    result = runner.invoke(app, ["validate", str(tmp_path / "a.toml")])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
