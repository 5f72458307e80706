"""dpaudit.trainers.opacus: an ordinary Opacus loop audited through one decorator.

The planted bugs of ``tests/plugins_opacus/loops.py`` are audited with ``dpaudit run``
and must exit 1, each caught by the grey-box check that sees it; the correct loop must
exit 0. Few models per arm suffice: every bug here is caught by a grey-box check from a
single run (the deterministic clipping and steps checks, or p-values of order 1e-200 for
the noise and batch sizes), so the models per arm are the fewest the lower bounds accept
(8 counted per arm after the split).
"""

from __future__ import annotations

import difflib
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("opacus")

from dpaudit.cli import app
from dpaudit.errors import ConfigError
from dpaudit.models import ModelSpec
from dpaudit.trainers import CanarySetup, TrainerSettings
from dpaudit.trainers.opacus import CANARY_NORM_FACTOR, opacus_trainer
from dpaudit.training import TrainingSpec

pytestmark = [
    pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning"),
    pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),
    pytest.mark.filterwarnings("ignore:Optimal order:UserWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins_opacus"
TRIALS = 16  # the fewest models per arm whose split leaves 8 per arm to count


def _changed_lines(a: Path, b: Path) -> list[str]:
    diff = difflib.unified_diff(a.read_text().splitlines(), b.read_text().splitlines())
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_the_audited_loop_is_the_plain_script_plus_at_most_ten_lines() -> None:
    changed = _changed_lines(
        ROOT / "audits" / "plugins" / "opacus_plain.py",
        ROOT / "audits" / "plugins" / "opacus_loop.py",
    )
    assert 0 < len(changed) <= 10, changed
    assert "+@opacus_trainer" in changed


# ------------------------------------------------------------------ the trainer protocol


def _data(n: int = 39, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows with an all-zero last feature, as dpaudit gives a Dirac audit. 39 rows: with
    the canary's row, 40, the loaders of batch 10 below have 4 batches either way (q = 1/4)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    X[:, -1] = 0.0
    return X, (rng.random(n) < 0.5).astype(np.int64)


def _small_loop(sigma: float = 1.0, batch_size: int = 10, epochs: int = 2):
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    def train(X, y):
        model = torch.nn.Linear(X.shape[1], 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(
            TensorDataset(torch.as_tensor(X), torch.as_tensor(y)), batch_size=batch_size
        )
        model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=sigma,
            max_grad_norm=1.0,
        )
        for _ in range(epochs):
            for xb, yb in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
        return model

    return train


def _protocol(X: np.ndarray, included: np.ndarray, *, score: str = "sum") -> dict:
    d = X.shape[1]
    direction = np.zeros(2 * d + 2)
    direction[d - 1] = 1.0  # class 0's weight on the all-zero feature
    canary = CanarySetup(
        kind="dirac", threat_model="white-box", included=included, direction=direction, score=score
    )

    settings = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(),
        num_classes=2,
        model_offset=0,
        options={"delta": 1e-5},
    )
    return {"seed": 3, "canary": canary, "settings": settings}


def test_reads_what_ran_from_opacus_and_reproduces_each_model() -> None:
    X, y = _data()
    trainer = opacus_trainer(_small_loop())
    included = np.array([False, True, False, True])
    membership = np.ones((4, X.shape[0]), dtype=bool)
    state = torch.get_rng_state()
    out = trainer(X, y, membership, **_protocol(X, included))
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is restored
    again = trainer(X, y, membership, **_protocol(X, included))
    np.testing.assert_array_equal(out.scores, again.scores)  # seeded per model
    assert len(set(out.scores.tolist())) == 4  # and each model has its own seed
    # batch size 10 of 39 or 40 rows: Opacus' Poisson loader samples at q = 1/4, 4 steps an epoch
    for r in out.records:
        assert (r.noise_multiplier, r.sampling_rate, r.steps, r.clipping_norm) == (
            1.0,
            0.25,
            8,
            1.0,
        )
        assert r.sampling == "poisson"
    # The canary is a row of the data of the models that hold it.
    assert [r.dataset_size for r in out.records] == [39, 40, 39, 40]
    assert trainer.canary_routes == ("sampler", "sampler")
    # The claim is Opacus' own RDP accountant ε at the options' δ.
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(1.0, 0.25, 8)]
    assert out.claim.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    assert out.claim.delta == 1e-5


def test_the_canary_goes_through_opacus_clipping_and_noise() -> None:
    """With σ = 0 the privatised sum on the canary's coordinate is exactly what Opacus'
    clipping left of the canary: C per step it was sampled (its norm was 1000·C), and 0
    for a model without it; the untouched coordinate reads exactly 0."""
    X, y = _data()
    trainer = opacus_trainer(_small_loop(sigma=0.0))
    included = np.array([False, True])
    out = trainer(X, y, np.ones((2, X.shape[0]), dtype=bool), **_protocol(X, included))
    obs = out.observations
    assert out.scores[0] == 0.0
    # Opacus clips by C / (norm + 1e-6): C·1000/(1000 + 1e-6) in float32 rounds to C.
    sampled = out.scores[1]
    assert sampled == pytest.approx(round(sampled), abs=1e-5)
    assert 1 <= round(sampled) <= 8
    assert np.all(obs.untouched_noise == 0.0)
    assert np.nanmax(obs.clipped_norms_max) <= 1.0 + 1e-6
    assert CANARY_NORM_FACTOR > 1.0
    # The canary is one more row of the data: 8 steps, batch sizes ~ Binomial(40, 1/4).
    assert obs.steps_run.tolist() == [8, 8]
    assert obs.per_model("dataset_size").tolist() == [39, 40]


def test_called_as_a_plain_function_it_trains_once() -> None:
    X, y = _data()
    model = opacus_trainer(_small_loop())(X, y)
    assert isinstance(model, torch.nn.Module)


def test_a_function_that_never_makes_private_is_an_error() -> None:
    X, y = _data()
    trainer = opacus_trainer(lambda X, y: torch.nn.Linear(X.shape[1], 2))
    with pytest.raises(ConfigError, match=r"never called PrivacyEngine.make_private"):
        trainer(X, y, np.ones((1, X.shape[0]), bool), **_protocol(X, np.array([True])))


def test_a_model_with_another_layout_is_an_error() -> None:
    X, y = _data()
    trainer = opacus_trainer(_small_loop())
    kwargs = _protocol(X[:, :2], np.array([True]))  # a direction for 2 features, not 3
    with pytest.raises(ConfigError, match=r"has 6 coordinates but the Opacus model has 8"):
        trainer(X, y, np.ones((1, X.shape[0]), bool), **kwargs)


def test_library_warnings_are_captured_and_summarised_once_per_distinct_warning() -> None:
    """Opacus warns "Secure RNG turned off" once per model: three models give ONE line
    saying 3 times, with the text; nothing reaches the console once per model."""
    X, y = _data()
    trainer = opacus_trainer(_small_loop())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(X, y, np.ones((3, X.shape[0]), bool), **_protocol(X, np.array([0, 1, 0]) > 0))
    texts = [str(w.message) for w in caught]
    secure = [t for t in texts if "Secure RNG" in t]
    assert len(secure) == 1, texts
    assert re.fullmatch(
        r"UserWarning raised 3 times over 3 models at opacus/privacy_engine\.py:\d+, captured "
        r'rather than shown: "Secure RNG turned off\. This is perfectly fine .*"',
        secure[0],
    )
    # every warning seen is a summary line, one per distinct warning
    assert all("captured rather than shown" in t for t in texts), texts
    assert len(texts) == len(set(texts))


def test_captured_warnings_are_counted_by_category_and_message() -> None:
    from dpaudit.trainers import CapturedOutput

    output = CapturedOutput()
    for _ in range(4):
        with output.capture_warnings():
            warnings.warn("overflow in the loss", RuntimeWarning, stacklevel=1)
            warnings.warn("overflow in the loss", RuntimeWarning, stacklevel=1)
            warnings.warn("other", UserWarning, stacklevel=1)
    lines = output.warning_summaries(4)
    assert [re.sub(r" at \S+:\d+", "", line) for line in lines] == [
        'RuntimeWarning raised 8 times over 4 models, captured rather than shown: "overflow '
        'in the loss"',
        'UserWarning raised 4 times over 4 models, captured rather than shown: "other"',
    ]
    assert lines[0].split(" at ")[1].startswith("tests/test_opacus_adapter.py:")


SIGNATURE_ERROR = (
    "@opacus_trainer cannot call train{shown}: it calls fn(X, y) (float32 features, int64 "
    "labels) or fn(dataset) (a torch Dataset of (features, label) pairs) and needs the "
    "trained model back, for example:"
)
SIGNATURE_EXAMPLE = [
    "@opacus_trainer",
    "def train(X, y):  # or def train(dataset):",
    "    ...  # model, optimizer, DataLoader; make_private; train; return model",
]


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("def train(model): ...", "(model)"),
        ("def train(a, b, c, d): ...", "(a, b, c, d)"),
        ("def train(): ...", "()"),
        ("def train(X, y, *, epochs): ...", "(X, y, *, epochs)"),
    ],
)
def test_a_function_of_another_shape_gets_the_accepted_signatures(source: str, shown: str) -> None:
    namespace: dict = {}
    exec(source, namespace)
    with pytest.raises(ConfigError) as error:
        opacus_trainer(namespace["train"])
    assert error.value.message == SIGNATURE_ERROR.format(shown=shown)
    assert list(error.value.example) == SIGNATURE_EXAMPLE
    # str() ends with the example, indented, as Python prints the exception
    assert str(error.value).splitlines() == [
        SIGNATURE_ERROR.format(shown=shown),
        *(f"    {line}" for line in SIGNATURE_EXAMPLE),
    ]


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_audit_naming_a_function_of_another_shape_exits_2_with_the_signatures(
    command: str, tmp_path: Path
) -> None:
    """``[dpsgd] trainer`` naming an ``@opacus_trainer`` function of another shape: the
    module fails to import at decoration, and the command says so in one error line with
    the three-line example under it, exit 2."""
    (tmp_path / "plugs").mkdir()
    (tmp_path / "plugs" / "__init__.py").write_text("")
    (tmp_path / "plugs" / "bad.py").write_text(
        "from dpaudit.opacus_adapter import opacus_trainer\n\n\n"
        "@opacus_trainer\n"
        "def train(model, optimizer, loader, epochs):\n"
        "    return model\n"
    )
    path = tmp_path / "bad.toml"
    path.write_text(
        _audit(tmp_path, "correct")
        .read_text()
        .replace("plugins_opacus.loops:correct", "plugs.bad:train")
    )
    args = [command, str(path)] + (["-o", str(tmp_path / "run")] if command == "run" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: " + SIGNATURE_ERROR.format(shown="(model, optimizer, loader, epochs)"),
        *(f"    {line}" for line in SIGNATURE_EXAMPLE),
    ]
    assert not (tmp_path / "run" / "results.json").exists()


def test_the_canary_row_follows_the_loaders_own_batches() -> None:
    """Shuffled fixed batches: the canary's row is in exactly one batch per epoch, so with
    σ = 0 the privatised sum on its coordinate is C in exactly one step of each epoch (a
    coin at q = 1/4 would put it in 0 to 4 of them)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    def shuffled(X, y):
        model = torch.nn.Linear(X.shape[1], 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
        model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
            module=model,
            optimizer=optimizer,
            data_loader=DataLoader(data, batch_size=10, shuffle=True),
            noise_multiplier=0.0,
            max_grad_norm=1.0,
            poisson_sampling=False,
        )
        for _ in range(2):
            for xb, yb in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
        return model

    X, y = _data()
    trainer = opacus_trainer(shuffled)
    included = np.arange(10) % 2 == 1
    out = trainer(X, y, np.ones((10, X.shape[0]), bool), **_protocol(X, included))
    x = trainer.transcripts
    assert trainer.canary_routes == ("sampler",) * 5
    assert np.all(x[~included] == 0.0)
    per_epoch = np.round(x[included]).reshape(5, 2, 4).sum(axis=2)
    assert per_epoch.tolist() == [[1, 1]] * 5
    # fixed batches of 10, 10, 10, 9 (or 10 with the canary's row): what ran, step by step
    assert out.observations.batch_sizes[~included].tolist() == [[10, 10, 10, 9] * 2] * 5
    assert out.observations.batch_sizes[included].tolist() == [[10] * 8] * 5


# ------------------------------------------------------------------- audits, exit codes


def _audit(tmp_path: Path, trainer: str, seed: int = 0, options: str = "", dpsgd: str = "") -> Path:
    if not (tmp_path / "plugins_opacus").exists():
        shutil.copytree(PLUGINS, tmp_path / "plugins_opacus")
    path = tmp_path / f"{trainer}-{seed}.toml"
    path.write_text(
        f"""[audit]
name = "{trainer}"
kinds = ["dpsgd"]
seed = {seed}

[dpsgd]
trainer = "plugins_opacus.loops:{trainer}"
dataset = "sklearn:breast_cancer"
canary = "dirac"
threat_model = "white-box"
trials = {TRIALS}
options = {{ epsilon = 5.47, delta = 1e-5{options} }}
{dpsgd}
[report]
html = false
""",
        encoding="utf-8",
    )
    return path


def _run(path: Path) -> tuple[int, dict]:
    import json

    out = path.parent / f"run-{path.stem}"
    result = CliRunner().invoke(app, ["run", str(path), "-q", "-o", str(out)])
    return result.exit_code, json.loads((out / "results.json").read_text())


# bug → (the grey-box check that must fail, extra options stating the configured run)
BUGS = {
    "sigma_tenth": ("greybox_noise", ""),
    "no_clipping": ("greybox_clipping", ""),
    "one_of_two_epochs": ("greybox_steps", ""),
    "shuffled_fixed": ("greybox_batch_sizes", ""),
    "weighted_sampler": ("greybox_batch_sizes", ", sampling_rate = 0.25, steps = 8"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_planted_bug_exits_1(bug: str, tmp_path: Path) -> None:
    check, options = BUGS[bug]
    code, results = _run(_audit(tmp_path, bug, options=options))
    assert code == 1
    failed = {c["name"] for c in results["checks"] if not c["passed"]}
    assert check in failed, failed


@pytest.mark.parametrize("seed", [0, 1])
def test_the_correct_loop_exits_0(seed: int, tmp_path: Path) -> None:
    code, results = _run(_audit(tmp_path, "correct", seed=seed))
    assert code == 0, [c for c in results["checks"] if not c["passed"]]
    assert results["tests"][0]["dpsgd"]["trainer_libraries"]["opacus"]


def test_library_warnings_reach_results_json_once_per_run_and_verify_agrees(
    tmp_path: Path,
) -> None:
    """Opacus warns "Secure RNG turned off" once per PrivacyEngine, so once per model: over
    four work units (10, 10, 10 and 2 models) results.json holds ONE line for it, 32 times
    over 32 models, and ``dpaudit verify`` recomputes the same warnings from the units."""
    path = _audit(tmp_path, "correct", dpsgd="models_per_unit = 10\n")
    code, results = _run(path)
    run_dir = path.parent / f"run-{path.stem}"
    assert code == 0
    assert len(list(run_dir.rglob("dpsgd-0000*.npz"))) == 4
    secure = [line for line in results["warnings"] if "Secure RNG" in line]
    assert len(secure) == 1, results["warnings"]
    assert re.fullmatch(
        r"UserWarning raised 32 times over 32 models at opacus/privacy_engine\.py:\d+, captured "
        r'rather than shown: "Secure RNG turned off\. This is perfectly fine .*"',
        secure[0],
    )
    captured = [line for line in results["warnings"] if "captured rather than shown" in line]
    assert len(captured) == len(set(captured))
    # Opacus' warning and torch's "Full backward hook" (once per step), each one line
    assert len(captured) == 2, captured
    assert all(re.search(r" raised \d+ times over 32 models at ", line) for line in captured)
    verified = CliRunner().invoke(app, ["verify", str(run_dir)])
    assert verified.exit_code == 0, verified.output


def test_trainer_messages_of_several_units_are_joined_into_one_line_each() -> None:
    """Counts summed, distinct printed lines joined (a line two units printed counts once),
    the first line of the first unit that printed, one line per distinct warning with
    where it was first raised; the arrays a unit stores give the messages back."""
    from dpaudit.trainers import CapturedOutput, TrainerMessages

    def unit(printed: list[str], warned: list[str], *, coined: int = 0) -> dict:
        output = CapturedOutput()
        with output.capture(), output.capture_warnings():
            for line in printed:
                print(line)
            for message in warned:
                warnings.warn(message, RuntimeWarning, stacklevel=1)
        messages = output.messages("loop", 2, coined=coined, holding=1)
        arrays = messages.to_arrays()
        assert TrainerMessages.from_arrays([arrays]) == messages
        return arrays

    joined = TrainerMessages.from_arrays(
        [
            unit([], ["overflow"]),
            unit(["epoch 1", "epoch 2"], ["overflow", "nan"], coined=1),
            unit(["epoch 1"], []),
            {"scores": np.zeros(2)},  # a unit stored without messages is passed over
        ]
    )
    assert joined is not None
    lines = [re.sub(r" at \S+:\d+", "", line) for line in joined.lines()]
    assert lines == [
        "The training function 'loop' printed 3 lines (2 distinct) over 6 models, captured "
        'rather than shown; the first: "epoch 1"',
        'RuntimeWarning raised 2 times over 6 models, captured rather than shown: "overflow"',
        'RuntimeWarning raised 1 time over 6 models, captured rather than shown: "nan"',
        "The Dirac canary's inclusion was decided by a coin with the loader's q in 1 of 3 "
        "models that hold it: their batches could not be followed from 'loop''s DataLoader "
        "to the optimizer's steps, so the sampling that ran did not decide it.",
    ]
    assert TrainerMessages.from_arrays([{"scores": np.zeros(2)}]) is None


def test_a_black_box_canary_is_a_row_of_the_models_that_hold_it() -> None:
    X, y = _data(n=40)
    X = np.concatenate([X, X[:1] * 3.0])  # the canary row, last
    y = np.concatenate([y, 1 - y[:1]])
    included = np.array([False, True])
    membership = np.ones((2, X.shape[0]), dtype=bool)
    membership[:, -1] = included
    canary = CanarySetup(kind="mislabeled", threat_model="black-box", included=included, row=40)
    kwargs = {**_protocol(X, included), "canary": canary}
    out = opacus_trainer(_small_loop())(X, y, membership, **kwargs)
    assert np.all(np.isfinite(out.scores))
    assert np.all(out.scores < 0)  # minus a cross-entropy
    # Opacus samples at 1/len(loader): batch 10 of 40 rows is q = 1/4 (4 steps an epoch),
    # of 41 rows q = 1/5 (5 steps): the records say what each model ran.
    assert [(r.dataset_size, r.sampling_rate, r.steps) for r in out.records] == [
        (40, 0.25, 8),
        (41, 0.2, 10),
    ]
    # The canary row leaves the zero feature at 0: the noise there is read in every step.
    obs = out.observations
    assert np.isfinite(obs.untouched_noise[0, :8]).all()
    assert np.isfinite(obs.untouched_noise[1]).all()


def _bound(epsilon: float, delta: float, mu: float | None, source: str):
    from dpaudit.accounting.upper_bounds import UpperBound

    return UpperBound(epsilon, delta, mu, source, {source: epsilon}, 0.0 if mu is None else 1e-9)


def test_records_and_a_claim_are_held_together_the_smaller_deciding() -> None:
    from dpaudit.dpsgd.summary import _tighter

    accountant = _bound(5.458, 1e-5, 1.429, "accountant")
    smaller = _tighter(accountant, _bound(4.0, 1e-5, None, "trainer claim"))
    assert (smaller.epsilon, smaller.epsilon_delta, smaller.mu) == (4.0, 1e-5, 1.429)
    assert smaller.source == "trainer claim (ε), accountant (μ)"
    assert smaller.mu_tail == 1e-9  # the tail of the bracket that gave μ
    assert smaller.detail["accountant_epsilon"] == 5.458
    # A larger claim, or one at a larger δ (it says nothing at δ = 1e-5), leaves the records.
    for claim in (_bound(6.0, 1e-5, None, "trainer claim"), _bound(4.0, 1e-3, None, "c")):
        held = _tighter(accountant, claim)
        assert (held.epsilon, held.mu, held.source) == (5.458, 1.429, "accountant")
    # A claim at a smaller δ holds at the audit's δ too ((ε, δ')-DP ⇒ (ε, δ)-DP, δ' ≤ δ).
    assert _tighter(accountant, _bound(4.0, 1e-7, None, "trainer claim")).epsilon == 4.0


def test_a_claimed_epsilon_without_its_delta_is_an_error() -> None:
    X, y = _data()
    kwargs = _protocol(X, np.array([True]))
    settings = kwargs["settings"]
    kwargs["settings"] = TrainerSettings(
        model=settings.model, training=settings.training, num_classes=2, options={"epsilon": 3.0}
    )
    with pytest.raises(ConfigError, match=r"claimed 'epsilon' in \[dpsgd\] options needs"):
        opacus_trainer(_small_loop())(X, y, np.ones((1, X.shape[0]), bool), **kwargs)


def test_without_opacus_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import dpaudit.trainers.opacus as adapter
    from dpaudit.trainers.opacus import opacus_version

    assert opacus_version() == __import__("opacus").__version__
    monkeypatch.setattr(adapter, "opacus", None)  # as the module is without the extra
    with pytest.raises(ConfigError, match=r"needs Opacus: pip install 'dpaudit\[opacus\]'"):
        opacus_version()


def test_virtual_steps_of_batch_memory_manager_are_one_step_each() -> None:
    """Opacus' BatchMemoryManager splits a logical batch into physical ones and clips each;
    the canary joins a logical step at most once and the noise closes the step."""
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    from torch.utils.data import DataLoader, TensorDataset

    def train(X, y):
        model = torch.nn.Linear(X.shape[1], 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
        model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
            module=model,
            optimizer=optimizer,
            data_loader=DataLoader(data, batch_size=20),
            noise_multiplier=0.0,
            max_grad_norm=1.0,
        )
        for _ in range(2):
            with BatchMemoryManager(
                data_loader=loader, max_physical_batch_size=5, optimizer=optimizer
            ) as batches:
                for xb, yb in batches:
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(xb), yb).backward()
                    optimizer.step()
        return model

    X, y = _data(n=79)
    trainer = opacus_trainer(train)
    out = trainer(X, y, np.ones((2, 79), bool), **_protocol(X, np.array([False, True])))
    assert [r.steps for r in out.records] == [8, 8]  # 4 logical steps an epoch (q = 1/4)
    # σ = 0: each logical step shows the canary once (exactly C) or not at all.
    assert set(np.unique(trainer.transcripts).tolist()) <= {0.0, 1.0}
    assert trainer.transcripts[0].sum() == 0.0
    assert out.observations.batch_sizes.max() > 5  # logical batches, not physical ones


def test_each_step_shows_the_canary_as_the_protocol_says() -> None:
    """Per step, the privatised sum on the canary's coordinate is N(0, σ²C²) without the
    canary and (1 − q)N(0, σ²C²) + qN(C, σ²C²) with it (sampled at q, clipped to C by
    Opacus, Opacus' noise). Kolmogorov–Smirnov at a fixed seed, p > 1e-3 each; and the
    in-arm mean within 4 standard errors of qC (the mixture's variance σ²C² + q(1 − q)C²)."""
    from scipy import stats

    X, y = _data()
    trainer = opacus_trainer(_small_loop(sigma=1.0))
    included = np.arange(60) % 2 == 1
    trainer(X, y, np.ones((60, X.shape[0]), bool), **_protocol(X, included))
    x = trainer.transcripts
    q = 0.25
    assert stats.kstest(x[~included].ravel(), "norm").pvalue > 1e-3
    mixture = stats.kstest(
        x[included].ravel(), lambda z: (1 - q) * stats.norm.cdf(z) + q * stats.norm.cdf(z - 1)
    )
    assert mixture.pvalue > 1e-3
    steps = x[included].size
    assert abs(x[included].mean() - q) < 4 * np.sqrt((1 + q * (1 - q)) / steps)
