"""Opacus users as they are: tutorial-shaped scripts, their prints, progress in models.

A tutorial-shaped script (a ``Dataset`` class, a ``DataLoader``, a model whose input width
is written down, ``PrivacyEngine().make_private`` and an epoch loop) is audited with at
most ten changed lines and no architecture restated in the audit file: the adapter hands
the function a ``Dataset`` of each model's rows at the data's own width and reads the
canary's coordinate from the model. What the loop prints is captured per model and
summarised once; each trained model is reported to the plain progress lines.
"""

from __future__ import annotations

import difflib
import io
import json
import logging
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("opacus")

from opacus import PrivacyEngine
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dpaudit.cli._common as cli_common
import dpaudit.trainers.opacus as adapter
from dpaudit.accounting import dpsgd_epsilon, dpsgd_mu_bracket
from dpaudit.cli import PlainProgress, app
from dpaudit.cli.progress import progress as cli_progress
from dpaudit.errors import ConfigError
from dpaudit.models import ModelSpec
from dpaudit.trainers import CanarySetup, CapturedOutput, TrainerSettings
from dpaudit.trainers.opacus import MODEL_PROGRESS, opacus_trainer
from dpaudit.training import TrainingSpec

pytestmark = [
    pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning"),
    pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),
    pytest.mark.filterwarnings("ignore:Optimal order:UserWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins_opacus"
TRIALS = 16  # the fewest models per arm whose split leaves 8 per arm to count
CHECKS = ["fail_on_violation", "greybox_batch_sizes", "greybox_clipping", "greybox_noise"]
CHECKS.append("greybox_steps")


def _changed_lines(a: Path, b: Path) -> list[str]:
    diff = difflib.unified_diff(a.read_text().splitlines(), b.read_text().splitlines())
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


# ------------------------------------------------------------ the tutorial-shaped scripts


@pytest.mark.parametrize(
    ("plain", "audited", "decorator"),
    [
        (
            ROOT / "audits" / "plugins" / "opacus_tutorial_plain.py",
            ROOT / "audits" / "plugins" / "opacus_tutorial.py",
            "+@opacus_trainer",
        ),
        (
            PLUGINS / "tutorial_images_plain.py",
            PLUGINS / "tutorial_images.py",
            "+@opacus_trainer(dataset=DigitImages)",
        ),
    ],
)
def test_a_tutorial_is_audited_with_at_most_ten_changed_lines(
    plain: Path, audited: Path, decorator: str
) -> None:
    changed = _changed_lines(plain, audited)
    assert 0 < len(changed) <= 10, changed
    assert decorator in changed
    assert "+def main(train_dataset):" in changed
    # The model, its input width, the loader and make_private stay as the tutorial has them.
    for word in ("nn.", "shape", "DataLoader", "make_private", "PrivacyEngine"):
        assert not [line for line in changed if word in line], (word, changed)


def test_the_tutorial_audit_file_does_not_restate_the_architecture() -> None:
    table = tomllib.loads((ROOT / "audits" / "opacus-tutorial.toml").read_text())["dpsgd"]
    assert table["trainer"] == "plugins.opacus_tutorial:main"
    assert not {"model", "hidden", "zero_features"} & set(table)


def _assert_checks_passed(results: dict) -> None:
    """Every check passed, the grey-box ones evaluated (none left "not-evaluated")."""
    status = {c["name"]: c["status"] for c in results["checks"]}
    assert set(status.values()) == {"passed"}, status
    assert {name: status.get(name) for name in CHECKS} == dict.fromkeys(CHECKS, "passed")


def _tutorial_audit(tmp_path: Path) -> Path:
    """audits/opacus-tutorial.toml with fewer models, next to a copy of audits/plugins."""
    shutil.copytree(ROOT / "audits" / "plugins", tmp_path / "plugins")
    text = (ROOT / "audits" / "opacus-tutorial.toml").read_text()
    text = text.replace("trials = 100", f"trials = {TRIALS}") + "\n[report]\nhtml = false\n"
    path = tmp_path / "opacus-tutorial.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_tutorial_audit_exits_0_prints_progress_in_models_and_not_the_loop(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    summary = (
        r"^The training function 'main' printed 64 lines \(\d+ distinct\) over 32 models, "
        r'captured rather than shown; the first: "Train Epoch: 1 Loss: \d\.\d{6} '
        r'\(ε = 4\.22, δ = 1e-05\)"$'
    )
    with pytest.warns(UserWarning, match=summary) as caught:
        result = CliRunner().invoke(
            app, ["run", str(_tutorial_audit(tmp_path)), "-o", str(run_dir)]
        )
    assert result.exit_code == 0, result.output
    assert len([w for w in caught if "printed" in str(w.message)]) == 1  # once, not 32 times
    # The loop's own lines are not shown; the run's warnings quote its first line once.
    quoted = [line for line in result.output.splitlines() if "Train Epoch" in line]
    assert len(quoted) == 1, quoted
    assert re.match("warning: " + summary.removeprefix("^"), quoted[0]), quoted
    lines = result.output.splitlines()
    # One unit of 32 models: a line at each tenth of them (4, 7, 10, ... of 32), then the
    # unit's own line.
    progress = [line for line in lines if line.startswith("training canary models:")]
    counted = [
        re.match(r"training canary models: 0/1 units, (\d+)/32 models \(", line)
        for line in progress[1:-1]
    ]
    assert progress[0] == "training canary models: 0/1 units"
    assert [int(m.group(1)) for m in counted if m] == [4, 7, 10, 13, 16, 20, 23, 26, 29]
    assert progress[-1].startswith("training canary models: 1/1 units (100%), ")
    results = json.loads((run_dir / "results.json").read_text())
    _assert_checks_passed(results)
    # The same summary, once, in the run's warnings (and so in its report)
    assert [w for w in results["warnings"] if re.match(summary, w)] == [
        w for w in results["warnings"] if "printed" in w
    ]
    assert len([w for w in results["warnings"] if re.match(summary, w)]) == 1
    # The upper bound is read from what Opacus ran: q = 1/4, 8 steps, σ = 1 (as opacus.toml):
    # ε for the ε bound and the claim-curve test, the μ bracket's high end for μ. The
    # reference is the accountant on those numbers in this process (ε ≈ 5.4576, μ ≈ 1.4287):
    # PLD's last digits move with the platform's floating point, the wiring must not.
    ran = {"noise_multiplier": 1.0, "sampling_rate": 0.25, "steps": 8}
    epsilon = dpsgd_epsilon(**ran, delta=1e-5)
    assert epsilon == pytest.approx(5.4576, abs=5e-5)
    assert [b["upper"] for b in results["bounds"]] == pytest.approx(
        [epsilon, dpsgd_mu_bracket(**ran)[1], epsilon], rel=1e-12
    )


def test_the_image_tutorial_audit_exits_0(tmp_path: Path) -> None:
    shutil.copytree(PLUGINS, tmp_path / "plugins_opacus")
    path = tmp_path / "images.toml"
    path.write_text(
        f"""[audit]
name = "images"
kinds = ["dpsgd"]

[dpsgd]
trainer = "plugins_opacus.tutorial_images:main"
dataset = "sklearn:digits"
canary = "dirac"
threat_model = "white-box"
trials = {TRIALS}

[report]
html = false
""",
        encoding="utf-8",
    )
    with pytest.warns(UserWarning, match=r"^The training function 'main' printed 64 lines"):
        result = CliRunner().invoke(app, ["run", str(path), "-q", "-o", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    _assert_checks_passed(results)


# ------------------------------------------------------------------ the trainer protocol


def _rows(n: int = 40, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows as dpaudit gives a Dirac audit: its all-zero feature last."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    X[:, -1] = 0.0
    return X, (rng.random(n) < 0.5).astype(np.int64)


def _protocol(X: np.ndarray, included: np.ndarray, canary: CanarySetup | None = None) -> dict:
    """dpaudit's Dirac canary for ``[dpsgd] model = "logistic"`` (the default)."""
    d = X.shape[1]
    direction = np.zeros(2 * d + 2)
    direction[d - 1] = 1.0  # class 0's weight on the all-zero (last) feature
    if canary is None:
        canary = CanarySetup(
            kind="dirac",
            threat_model="white-box",
            included=included,
            direction=direction,
            score="sum",
        )
    settings = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(),
        num_classes=2,
        options={"delta": 1e-5},
    )
    return {"seed": 3, "canary": canary, "settings": settings}


def _fit(model: nn.Module, loader: DataLoader, *, sigma: float, epochs: int = 2) -> nn.Module:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
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
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    return model


class Squares(Dataset):
    """Rows of 4 values as 1×2×2 images; remembers the shapes it was built from."""

    built: ClassVar[list[tuple[int, ...]]] = []

    def __init__(self, X, y):
        Squares.built.append(tuple(np.shape(X)))
        self.images = torch.as_tensor(X, dtype=torch.float32).reshape(-1, 1, 2, 2)
        self.labels = torch.as_tensor(y)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 2, kernel_size=2), nn.Flatten(), nn.Linear(2, 2))


def _assert_the_canary_alone(out, included: np.ndarray, steps: int) -> None:
    """σ = 0: the privatised sum on the canary's coordinate is C per step it was sampled
    and nothing else, so no real example touched it; the reserved untouched one reads 0."""
    obs = out.observations
    for score, has in zip(out.scores, included, strict=True):
        assert score == pytest.approx(round(score), abs=1e-5)
        assert (0 <= round(score) <= steps) if has else score == 0.0
    assert max(out.scores) >= 1.0  # sampled at least once: the canary went through
    assert np.all(obs.untouched_noise == 0.0)
    assert np.nanmax(obs.clipped_norms_max) <= 1.0 + 1e-6
    assert obs.steps_run.tolist() == [steps] * len(included)


def test_a_dataset_taking_cnn_gets_the_data_width_and_the_canary_on_its_first_weight() -> None:
    @opacus_trainer(dataset=Squares)
    def main(train_dataset):
        return _fit(_cnn(), DataLoader(train_dataset, batch_size=10), sigma=0.0)

    Squares.built.clear()
    X, y = _rows(d=5)  # 4 features and dpaudit's all-zero one
    X, y = X[:39], y[:39]  # 39 rows, 40 with the canary's: 4 batches of 10 either way
    included = np.array([False, True, True])
    out = main(X, y, np.ones((3, 39), dtype=bool), **_protocol(X, included))
    # the all-zero feature is left out; the canary is a row of the data that holds it
    assert Squares.built == [(39, 4), (40, 4), (40, 4)]
    # The conv's weights are touched by every real example; the canary's (unit 0's last
    # weight of the first parameter) and the reserved one are kept clear of them.
    _assert_the_canary_alone(out, included, steps=8)
    assert [r.dataset_size for r in out.records] == [39, 40, 40]


def test_an_mlp_in_the_arrays_form_needs_no_architecture_in_the_audit_file() -> None:
    @opacus_trainer
    def train(X, y):
        model = nn.Sequential(nn.Linear(X.shape[1], 4), nn.ReLU(), nn.Linear(4, 2))
        loader = DataLoader(
            torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y)), batch_size=10
        )
        return _fit(model, loader, sigma=0.0)

    X, y = _rows(d=5)
    X, y = X[:39], y[:39]  # with the canary's row, 40: 4 batches of 10 either way
    included = np.array([True, False, True])
    # The direction is laid out for a logistic model (12 coordinates); the MLP has 34.
    out = train(X, y, np.ones((3, 39), dtype=bool), **_protocol(X, included))
    _assert_the_canary_alone(out, included, steps=8)


def test_a_black_box_canary_reaches_the_model_through_the_dataset_class() -> None:
    @opacus_trainer(dataset=Squares)
    def main(train_dataset):
        return _fit(_cnn(), DataLoader(train_dataset, batch_size=10), sigma=1.0)

    Squares.built.clear()
    X, y = _rows(d=4)
    X = np.concatenate([X, X[:1] * 3.0])  # the canary row, last
    y = np.concatenate([y, 1 - y[:1]])
    included = np.array([False, True])
    membership = np.ones((2, 41), dtype=bool)
    membership[:, -1] = included
    canary = CanarySetup(kind="mislabeled", threat_model="black-box", included=included, row=40)
    out = main(X, y, membership, **_protocol(X, included, canary))
    assert Squares.built == [(1, 4), (40, 4), (41, 4)]  # the canary as an image, first
    assert np.all(np.isfinite(out.scores))
    assert np.all(out.scores < 0)  # minus a cross-entropy


def test_called_as_a_plain_function_the_dataset_form_trains_once() -> None:
    @opacus_trainer
    def main(train_dataset):
        return _fit(_cnn(), DataLoader(train_dataset, batch_size=10), sigma=1.0)

    X, y = _rows(d=4)
    assert isinstance(main(Squares(X, y)), nn.Module)
    assert main.takes_dataset


def test_a_dataset_class_for_a_function_of_arrays_is_an_error() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^opacus_trainer\(dataset=\.\.\.\) builds the Dataset a function of one argument "
        r"trains on; 'train' takes the arrays \(X, y\)\.$",
    ):

        @opacus_trainer(dataset=Squares)
        def train(X, y):
            return None


def test_the_accountant_answers_once_for_all_models() -> None:
    """A loop that asks ε every epoch asks each model the same question: Opacus' own
    accountant computes each answer once, and every model reads the same value."""
    from opacus.accountants import RDPAccountant

    asked: list[float] = []

    @opacus_trainer
    def train(X, y):
        model = nn.Linear(X.shape[1], 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(
            torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y)), batch_size=10
        )
        engine = PrivacyEngine(accountant="rdp")
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
        )
        for _ in range(2):
            for xb, yb in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
            asked.append(engine.get_epsilon(1e-5))
        return model

    adapter._opacus_epsilon.cache_clear()
    X, y = _rows()
    X, y = X[:39], y[:39]  # with the canary's row, 40: q = 1/4 in every model
    included = np.array([False, True, False, True])
    train(X, y, np.ones((4, 39), dtype=bool), **_protocol(X, included))
    expected = []
    for steps in (4, 8):
        accountant = RDPAccountant()
        accountant.history = [(1.0, 0.25, steps)]
        expected.append(accountant.get_epsilon(1e-5))
    assert asked == expected * 4
    # 2 questions (after 4 and 8 steps) by 4 models, then each model's claim at 8 steps:
    # computed twice in all, read 10 times.
    info = adapter._opacus_epsilon.cache_info()
    assert (info.misses, info.hits) == (2, 10)


# ------------------------------------------------------------------ what the loop prints


def test_what_the_loop_prints_is_captured_and_summarised_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @opacus_trainer
    def loud(X, y):
        loader = DataLoader(
            torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y)), batch_size=10
        )
        print("epoch 1")
        print("epoch 2")
        print("epoch 2", file=sys.stderr)
        return _fit(nn.Linear(X.shape[1], 2), loader, sigma=1.0, epochs=1)

    X, y = _rows()
    included = np.array([False, True, False, True, False])
    with pytest.warns(UserWarning, match="printed") as caught:
        loud(X, y, np.ones((5, 40), dtype=bool), **_protocol(X, included))
    summaries = [str(w.message) for w in caught if "printed" in str(w.message)]
    assert summaries == [
        "The training function 'loud' printed 15 lines (2 distinct) over 5 models, captured "
        'rather than shown; the first: "epoch 1"'
    ]
    assert capsys.readouterr() == ("", "")


def test_a_failing_run_shows_what_it_printed(capsys: pytest.CaptureFixture[str]) -> None:
    @opacus_trainer
    def broken(X, y):
        print("loading the data")
        raise ValueError("no such column")

    X, y = _rows()
    with pytest.raises(ValueError, match=r"^no such column$"):
        broken(X, y, np.ones((1, 40), dtype=bool), **_protocol(X, np.array([True])))
    assert capsys.readouterr() == ("", "loading the data\n")


def test_captured_output_counts_progress_bar_redraws_and_quotes_safely() -> None:
    output = CapturedOutput()
    with output.capture():
        print("\x1b[31mred\x1b[0m 10%\r\x1b[31mred\x1b[0m 20%\n\n")
    with output.capture():
        print("\x1b[31mred\x1b[0m 10%")
    assert output.lines == 3
    assert output.summary("The training function 'f'", 2) == (
        "The training function 'f' printed 3 lines (2 distinct) over 2 models, captured "
        'rather than shown; the first: "\\x1b[31mred\\x1b[0m 10%"'
    )
    assert CapturedOutput().summary("f", 1) is None


# -------------------------------------------------------------------- progress in models


def _clocked(every_fraction: float = 0.1) -> tuple[PlainProgress, list[str], list[float]]:
    lines: list[str] = []
    now = [0.0]
    progress = PlainProgress(lines.append, every_fraction=every_fraction, clock=lambda: now[0])
    return progress, lines, now


def _trained(done: int, total: int) -> None:
    MODEL_PROGRESS.info("trained model %d of %d", done, total, extra={"models": (done, total)})


def _listeners() -> list[logging.Handler]:
    return [h for h in MODEL_PROGRESS.handlers if isinstance(h, PlainProgress._Listener)]


def test_plain_progress_counts_the_models_of_a_unit_at_every_tenth() -> None:
    assert MODEL_PROGRESS.name == PlainProgress.MODELS_LOGGER  # the one channel
    progress, lines, now = _clocked()
    progress("training", 1, 0)  # the audit announces the kind's one unit
    assert len(_listeners()) == 1
    for done in range(1, 41):
        now[0] += 1.0  # 1 s a model
        _trained(done, 40)
    progress("training", 1, 1)
    assert lines[0] == "training: 0/1 units"
    assert lines[1] == "training: 0/1 units, 4/40 models (10%), 4 s elapsed, about 36 s left"
    assert lines[3] == "training: 0/1 units, 12/40 models (30%), 12 s elapsed, about 28 s left"
    assert lines[9] == "training: 0/1 units, 36/40 models (90%), 36 s elapsed, about 4 s left"
    assert lines[10:] == ["training: 1/1 units (100%), 40 s elapsed"]
    # Done: it listens no more, and the logger is as it was.
    assert _listeners() == []
    assert MODEL_PROGRESS.level == logging.NOTSET
    _trained(1, 40)
    assert len(lines) == 11


def test_a_progress_stopped_before_its_kind_finished_gives_the_logger_back() -> None:
    """An audit that raises mid-kind leaves no listener and no INFO level on the logger."""
    MODEL_PROGRESS.setLevel(logging.WARNING)
    closed, _, _ = _clocked()
    closed("training", 3, 0)
    assert (len(_listeners()), MODEL_PROGRESS.level) == (1, logging.INFO)
    closed.close()  # what the CLI's progress does when the audit stops early
    assert (_listeners(), MODEL_PROGRESS.level) == ([], logging.WARNING)
    closed.close()  # twice is harmless
    dropped, _, _ = _clocked()
    dropped("training", 3, 1)
    assert MODEL_PROGRESS.level == logging.INFO
    del dropped  # collected: its finalizer detaches
    assert (_listeners(), MODEL_PROGRESS.level) == ([], logging.WARNING)


def _audit_stopped_in_its_first_unit() -> None:
    with cli_progress(quiet=False) as progress:
        assert isinstance(progress, PlainProgress)
        progress("training", 2, 0)
        assert MODEL_PROGRESS.level == logging.INFO
        raise RuntimeError("stopped")


def test_the_cli_progress_closes_when_the_audit_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_common, "err_console", Console(file=io.StringIO()))  # not a terminal
    with pytest.raises(RuntimeError, match="stopped"):
        _audit_stopped_in_its_first_unit()
    assert (_listeners(), MODEL_PROGRESS.level) == ([], logging.NOTSET)


def test_plain_progress_counts_models_every_30_seconds() -> None:
    progress, lines, now = _clocked()
    progress("slow", 1, 0)
    for done in range(1, 6):
        now[0] += 31.0
        _trained(done, 1000)  # 0.1 % a model: only the clock triggers a line
    assert len(lines) == 6
    # 155 s for 5 models: 995 more at 31 s each ≈ 8.6 h
    assert lines[-1] == "slow: 0/1 units, 5/1000 models (0%), 3 min elapsed, about 8.6 h left"
    progress("slow", 1, 1)
    assert _listeners() == []


def test_plain_progress_counts_models_inside_the_unit_in_progress_of_several() -> None:
    progress, lines, now = _clocked(every_fraction=0.25)
    progress("training", 2, 0)
    for _ in range(2):
        for done in range(1, 11):
            now[0] += 1.0
            _trained(done, 10)
        progress("training", 2, 1)
    assert lines == [
        "training: 0/2 units",
        "training: 0/2 units, 5/10 models (25%), 5 s elapsed, about 15 s left",
        "training: 1/2 units (50%), 10 s elapsed, about 10 s left",
        "training: 1/2 units, 5/10 models (75%), 15 s elapsed, about 5 s left",
        "training: 2/2 units (100%), 20 s elapsed",
    ]


def test_the_adapter_reports_each_trained_model_to_plain_progress() -> None:
    progress, lines, now = _clocked(every_fraction=0.25)

    @opacus_trainer
    def train(X, y):
        now[0] += 2.0
        loader = DataLoader(
            torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y)), batch_size=10
        )
        return _fit(nn.Linear(X.shape[1], 2), loader, sigma=1.0, epochs=1)

    X, y = _rows()
    progress("training canary models", 1, 0)
    train(X, y, np.ones((4, 40), dtype=bool), **_protocol(X, np.array([0, 1, 0, 1]) > 0))
    progress("training canary models", 1, 1)
    assert lines == [
        "training canary models: 0/1 units",
        "training canary models: 0/1 units, 1/4 models (25%), 2 s elapsed, about 6 s left",
        "training canary models: 0/1 units, 2/4 models (50%), 4 s elapsed, about 4 s left",
        "training canary models: 0/1 units, 3/4 models (75%), 6 s elapsed, about 2 s left",
        "training canary models: 1/1 units (100%), 8 s elapsed",
    ]


def test_the_model_records_do_not_reach_the_root_logger() -> None:
    """Opacus configures a root logger that prints INFO: progress must not flood it."""
    seen: list[logging.LogRecord] = []
    root = logging.getLogger()
    handler = logging.Handler(logging.INFO)
    handler.emit = seen.append  # type: ignore[method-assign]
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    progress, lines, _ = _clocked()
    try:
        progress("training", 1, 0)
        _trained(1, 2)
        progress("training", 1, 1)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert seen == []
    assert lines[1] == "training: 0/1 units, 1/2 models (50%), 0 s elapsed, about 0 s left"


# ------------------------------------------------------------------ the preflight


def test_the_preflight_runs_the_loop_once_on_two_rows_of_different_labels() -> None:
    seen: list[tuple[tuple[int, ...], list[int]]] = []

    @opacus_trainer
    def train(X, y):
        seen.append((tuple(X.shape), sorted(int(v) for v in y)))
        model = nn.Linear(X.shape[1], 2)
        loader = DataLoader(torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y)))
        return _fit(model, loader, sigma=1.0, epochs=1)

    X, y = _rows()
    y[0] = 1 - y[1:].max()  # row 0's label differs from every other but none is needed
    y[1:] = 1 - y[0]
    state = torch.get_rng_state()
    train.preflight(X, y, white_box=True)
    assert seen == [((2, X.shape[1]), [0, 1])]
    assert torch.equal(torch.get_rng_state(), state)  # the global generator restored


def test_the_preflight_names_a_loop_that_never_makes_private() -> None:
    @opacus_trainer
    def train(X, y):
        return nn.Linear(X.shape[1], 2)

    X, y = _rows()
    with pytest.raises(ConfigError, match=r"^The Opacus trainer 'train' never called "):
        train.preflight(X, y, white_box=True)


def test_the_preflight_names_a_loop_that_fails_on_its_own_code() -> None:
    @opacus_trainer
    def main(dataset):
        raise KeyError("lr")

    X, y = _rows()
    with pytest.raises(
        ConfigError,
        match=r"^The Opacus trainer 'main' failed when run on two rows before the audit: "
        r"KeyError: 'lr'$",
    ):
        main.preflight(X, y, white_box=True)


def test_a_black_box_preflight_needs_the_model_returned() -> None:
    @opacus_trainer
    def train(X, y):
        model = nn.Linear(X.shape[1], 2)
        loader = DataLoader(torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y)))
        _fit(model, loader, sigma=1.0, epochs=1)
        return "done"

    X, y = _rows()
    train.preflight(X, y, white_box=True)  # white-box reads the transcripts, not the model
    with pytest.raises(ConfigError, match=r"returned str; a black-box audit needs the trained"):
        train.preflight(X, y, white_box=False)


def test_validate_runs_the_preflight_and_exits_2_before_any_training(tmp_path: Path) -> None:
    package = tmp_path / "preflight_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "loop.py").write_text(
        "from torch import nn\n"
        "from dpaudit.trainers.opacus import opacus_trainer\n\n\n"
        "@opacus_trainer\n"
        "def main(dataset):\n"
        "    return nn.Linear(4, 2)  # forgot make_private\n",
        encoding="utf-8",
    )
    path = tmp_path / "loop.toml"
    path.write_text(
        '[audit]\nname = "loop"\nkinds = ["dpsgd"]\n\n[dpsgd]\n'
        'trainer = "preflight_plugins.loop:main"\ndataset = "sklearn:breast_cancer"\n'
        'canary = "dirac"\nthreat_model = "white-box"\ntrials = 16\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "The Opacus trainer 'main' never called PrivacyEngine.make_private" in result.output
