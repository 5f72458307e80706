"""Unusable inputs of a brought target: exit 2 with one line naming the file, never a traceback.

Each case writes one bad file next to a tiny audit (40 rows, 3 features, the loss attack)
and runs ``dpaudit run`` through Typer's ``CliRunner``: the exit code is 2, stderr holds
exactly one line that names the file and matches the case's message, and no
``results.json`` is written. The same cases go through :func:`dpaudit.membership.brought.preflight`,
which must refuse each one before any work unit runs.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from dpaudit.audit import run_context
from dpaudit.cli import app
from dpaudit.config import load_config
from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.membership.brought import preflight
from dpaudit.membership.kind import byo_spec
from dpaudit.sections import ByoSpec

N, D = 40, 3

AUDIT = """
[audit]
name = "bad"
kinds = ["membership"]
seed = 0
[data]
dataset = "{dataset}"
label = "y"
[model]
kind = "mlp"
hidden = [4]
[training]
epochs = 1
batch_size = 8
[target]
{target}
[membership]
attacks = ["loss"]
"""

MEMBER = 'membership = "member"'


def _table(root: Path, name: str = "data.csv", *, extra: str = "") -> str:
    """A 40-row CSV: features x0..x2, label y, membership of the first 30 rows."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))
    y = rng.integers(0, 2, N)
    lines = ["x0,x1,x2,y,member" + (",name" if extra else "")]
    for i in range(N):
        member = str(i % 2) if i < 30 else ""
        row = [f"{v:.4f}" for v in X[i]] + [str(y[i]), member]
        lines.append(",".join(row + ([f"{extra}{i}"] if extra else [])))
    (root / name).write_text("\n".join(lines) + "\n")
    return f"csv:{name}"


def _safetensors(root: Path, name: str = "m.safetensors", *, width: int = D) -> bytes:
    """A one-hidden-layer MLP's weights as [model] (kind mlp, hidden [4]) expects them."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(width, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, root / name)
    return (root / name).read_bytes()


def _onnx_bytes() -> bytes:
    """A tiny valid ONNX model (X @ W + b), built without torch's exporter."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((D, 2), np.float32), "W")
    b = numpy_helper.from_array(np.zeros(2, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["X", "W", "b"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, D])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 2])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _skops_bytes(root: Path) -> bytes:
    from sklearn.linear_model import LogisticRegression
    from skops.io import dump

    rng = np.random.default_rng(0)
    dump(LogisticRegression().fit(rng.normal(size=(20, D)), np.arange(20) % 2), root / "ok.skops")
    return (root / "ok.skops").read_bytes()


def _bad_safetensors_header(root: Path) -> tuple[str, str]:
    # The first 8 bytes are the header's length: 2**40 bytes is more than any file here.
    (root / "huge.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}")
    return _table(root), 'path = "huge.safetensors"\n' + MEMBER


def _truncated_safetensors(root: Path) -> tuple[str, str]:
    good = _safetensors(root, "whole.safetensors")
    (root / "cut.safetensors").write_bytes(good[: len(good) // 2])
    return _table(root), 'path = "cut.safetensors"\n' + MEMBER


def _garbage_safetensors(root: Path) -> tuple[str, str]:
    (root / "junk.safetensors").write_bytes(b"this is not a safetensors file at all")
    return _table(root), 'path = "junk.safetensors"\n' + MEMBER


def _truncated_onnx(root: Path) -> tuple[str, str]:
    good = _onnx_bytes()
    (root / "cut.onnx").write_bytes(good[: len(good) // 2])
    return _table(root), 'path = "cut.onnx"\noutput = "logits"\n' + MEMBER


def _truncated_skops(root: Path) -> tuple[str, str]:
    good = _skops_bytes(root)
    (root / "cut.skops").write_bytes(good[: len(good) // 2])
    return _table(root), 'path = "cut.skops"\n' + MEMBER


def _garbage_pt2(root: Path) -> tuple[str, str]:
    (root / "junk.pt2").write_bytes(b"garbage " * 16)
    return _table(root), 'path = "junk.pt2"\n' + MEMBER


def _garbage_torchscript(root: Path) -> tuple[str, str]:
    (root / "junk.torchscript").write_bytes(b"garbage " * 16)
    return _table(root), 'path = "junk.torchscript"\n' + MEMBER


def _model_is_a_folder(root: Path) -> tuple[str, str]:
    (root / "model.onnx").mkdir()
    return _table(root), 'path = "model.onnx"\n' + MEMBER


def _header_only_scores(root: Path) -> tuple[str, str]:
    (root / "scores.csv").write_text("member,loss\n")
    return _table(root), 'scores = "scores.csv"'


def _header_only_membership(root: Path) -> tuple[str, str]:
    _safetensors(root)
    (root / "index.csv").write_text("row,member\n")
    return _table(root), 'path = "m.safetensors"\nmembership = "index.csv"'


def _dataset_is_a_folder(root: Path) -> tuple[str, str]:
    _safetensors(root)
    (root / "tables").mkdir()
    return "csv:tables", 'path = "m.safetensors"\n' + MEMBER


def _text_feature(root: Path) -> tuple[str, str]:
    _safetensors(root)
    return _table(root, extra="patient-"), 'path = "m.safetensors"\n' + MEMBER


def _not_utf8(root: Path) -> tuple[str, str]:
    _safetensors(root)
    _table(root)
    text = (root / "data.csv").read_text().replace("x0", "caf\u00e9", 1)
    (root / "latin.csv").write_bytes(text.encode("latin-1"))
    return "csv:latin.csv", 'path = "m.safetensors"\n' + MEMBER


def _corrupt_parquet(root: Path) -> tuple[str, str]:
    _safetensors(root)
    (root / "data.parquet").write_bytes(b"PAR1" + b"\x00" * 64)
    return "parquet:data.parquet", 'path = "m.safetensors"\n' + MEMBER


# case → (writes the files and returns (dataset, [target] lines), the one line's pattern)
CASES: dict[str, tuple[Callable[[Path], tuple[str, str]], str]] = {
    "safetensors header too large": (
        _bad_safetensors_header,
        r"huge\.safetensors' is not a readable safetensors file \(header too large\).*save it "
        r"again with safetensors\.torch\.save_file",
    ),
    "safetensors truncated": (
        _truncated_safetensors,
        r"cut\.safetensors' is not a readable safetensors file .*truncated or corrupt",
    ),
    "safetensors garbage": (
        _garbage_safetensors,
        r"junk\.safetensors' is not a readable safetensors file",
    ),
    "onnx truncated": (_truncated_onnx, r"cut\.onnx' is not a readable ONNX file"),
    "skops truncated": (
        _truncated_skops,
        r"cut\.skops' is not a readable skops file \(File is not a zip file\).*skops\.io\.dump",
    ),
    "pt2 garbage": (_garbage_pt2, r"junk\.pt2' is not a readable torch\.export file"),
    "torchscript garbage": (
        _garbage_torchscript,
        r"junk\.torchscript' is not a readable TorchScript file.*torch\.jit\.save",
    ),
    "model file is a folder": (_model_is_a_folder, r"model file '.*model\.onnx' is a folder"),
    "scores csv header only": (
        _header_only_scores,
        r"scores file '.*scores\.csv' has a header but no rows",
    ),
    "membership csv header only": (
        _header_only_membership,
        r"membership index file '.*index\.csv' has a header but no rows",
    ),
    "dataset is a folder": (_dataset_is_a_folder, r"data file '.*tables' is a folder"),
    "text column among features": (
        _text_feature,
        r"column 'name' of 'csv:data\.csv' holds text \(e\.g\. 'patient-0'\); features must be "
        r"numeric, or name the columns to use in \[data\] features",
    ),
    "csv not utf-8": (
        _not_utf8,
        r"data file '.*latin\.csv' is not UTF-8 text \(byte 0xe9 at position 3\); save it as "
        r"UTF-8",
    ),
    "parquet corrupt": (
        _corrupt_parquet,
        r"data file '.*data\.parquet' is not a readable Parquet file .*truncated or corrupt",
    ),
}


def _audit(root: Path, case: str) -> Path:
    dataset, target = CASES[case][0](root)
    f = root / "audit.toml"
    f.write_text(AUDIT.format(dataset=dataset, target=target))
    return f


def _spec(path: Path) -> ByoSpec:
    config = load_config(path)
    return byo_spec(config.section("membership"), run_context(config))


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    audit = _audit(tmp_path, case)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(audit), "-q", "-o", str(out)])
    assert result.exit_code == 2, (case, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0] == result.stderr.strip()
    assert re.search(CASES[case][1], lines[0]), (CASES[case][1], lines[0])
    assert not (out / "results.json").exists()


def test_a_library_logger_adds_no_line_on_the_real_stderr(tmp_path: Path) -> None:
    # torch.export.load logs a failed read, traceback and all, through torch's own log
    # handler, which writes to the process's stderr where CliRunner does not look: run the
    # real command once.
    audit = _audit(tmp_path, "pt2 garbage")
    done = subprocess.run(
        [sys.executable, "-m", "dpaudit.cli", "run", str(audit), "-q", "-o", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, lines
    assert re.search(CASES["pt2 garbage"][1], lines[0])


@pytest.mark.parametrize("case", list(CASES))
def test_preflight_refuses_each_bad_input(case: str, tmp_path: Path) -> None:
    spec = _spec(_audit(tmp_path, case))
    with pytest.raises(DataError, match=CASES[case][1]) as info:
        preflight(spec)
    assert "\n" not in str(info.value)


def test_preflight_passes_a_good_target(tmp_path: Path) -> None:
    _safetensors(tmp_path)
    dataset = _table(tmp_path)
    (tmp_path / "ok.toml").write_text(
        AUDIT.format(dataset=dataset, target='path = "m.safetensors"\n' + MEMBER)
    )
    assert preflight(_spec(tmp_path / "ok.toml")) is None


def test_preflight_runs_the_model_on_data_rows(tmp_path: Path) -> None:
    # A TorchScript model for 5 features cannot take [data]'s 3: torch says so with a
    # RuntimeError, which preflight reports as one line naming the model.
    torch.jit.save(torch.jit.script(torch.nn.Linear(5, 2)), str(tmp_path / "wide.torchscript"))
    dataset = _table(tmp_path)
    (tmp_path / "a.toml").write_text(
        AUDIT.format(dataset=dataset, target='path = "wide.torchscript"\n' + MEMBER)
    )
    with pytest.raises(
        DataError, match=r"target 'wide\.torchscript' failed on 2 rows of \[data\] \(3 encoded"
    ):
        preflight(_spec(tmp_path / "a.toml"))


def test_preflight_checks_the_safetensors_architecture(tmp_path: Path) -> None:
    _safetensors(tmp_path, width=5)
    dataset = _table(tmp_path)
    (tmp_path / "a.toml").write_text(
        AUDIT.format(dataset=dataset, target='path = "m.safetensors"\n' + MEMBER)
    )
    with pytest.raises(DataError, match=r"5 inputs and 2 classes; \[data\] has 3 features"):
        preflight(_spec(tmp_path / "a.toml"))


def test_preflight_imports_the_factory(tmp_path: Path) -> None:
    dataset = _table(tmp_path)
    (tmp_path / "a.toml").write_text(
        AUDIT.format(dataset=dataset, target='factory = "no_such_module:build"\n' + MEMBER)
    )
    with pytest.raises(
        ConfigError, match=r"Cannot import module 'no_such_module' for \[target\] factory"
    ):
        preflight(_spec(tmp_path / "a.toml"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("member,loss\n1,0.5\n0,low\n", r"column 'loss' must hold numbers; it holds text"),
        ("member,prob_0,prob_1\n1,0.5,0.5\n0,0.2,0.8\n", r"needs a 'label' column"),
        ("member,loss\n1,0.5\n1,0.2\n", r"needs both members and non-members; got 2 members"),
        ("member,score\n1,0.5\n0,0.2\n", r"needs a 'loss' column"),
        (
            "member,label,prob_0,prob_1\n1,a,0.5,0.5\n0,1,0.2,0.8\n",
            r"column 'label' must hold class numbers 0, 1, \.\.\.\. Got 'a'",
        ),
    ],
)
def test_preflight_reads_the_scores_file(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "s.csv").write_text(text)
    (tmp_path / "a.toml").write_text(
        AUDIT.format(dataset=_table(tmp_path), target='scores = "s.csv"')
    )
    with pytest.raises(DpauditError, match=match):
        preflight(_spec(tmp_path / "a.toml"))


def test_missing_membership_index_file_is_named(tmp_path: Path) -> None:
    _safetensors(tmp_path)
    (tmp_path / "a.toml").write_text(
        AUDIT.format(
            dataset=_table(tmp_path), target='path = "m.safetensors"\nmembership = "gone.csv"'
        )
    )
    with pytest.raises(DataError, match=r"membership index file '.*gone\.csv' does not exist"):
        preflight(_spec(tmp_path / "a.toml"))


def test_membership_index_rows_must_be_row_numbers(tmp_path: Path) -> None:
    _safetensors(tmp_path)
    (tmp_path / "index.csv").write_text("row,member\n0,1\n1.5,0\n")
    (tmp_path / "a.toml").write_text(
        AUDIT.format(
            dataset=_table(tmp_path), target='path = "m.safetensors"\nmembership = "index.csv"'
        )
    )
    with pytest.raises(DataError, match=r"column 'row' must hold 0-based row numbers.*Got 1\.5"):
        preflight(_spec(tmp_path / "a.toml"))


@pytest.mark.parametrize(
    ("trials", "threshold", "needed"),
    # the fewest per arm with 1 − δ − u > u, u = 1 − a^(1/n) for 0 errors in the n counted:
    # split counts n − round(n/2) at a = 0.025; bonferroni all n at a = 0.025/(n + 1)
    [(11, "split", 12), (8, "bonferroni", 9)],
)
def test_validate_refuses_too_few_dpsgd_models_before_any_training(
    tmp_path: Path, trials: int, threshold: str, needed: int
) -> None:
    text = (
        '[audit]\nname = "few"\nkinds = ["dpsgd"]\ndelta = 1e-5\n\n[dpsgd]\ntrainer = "dpsgd"\n'
        f'canary = "dirac"\nthreat_model = "white-box"\nrows = 50\nthreshold = "{threshold}"\n'
        "trials = {}\n\n[dpsgd.training]\nepochs = 1\nbatch_size = 25\n\n"
        "[dpsgd.training.dp]\nnoise_multiplier = 1.0\nclipping_norm = 1.0\n"
    )
    for n, code in ((trials, 2), (needed, 0)):
        path = tmp_path / f"few-{n}.toml"
        path.write_text(text.format(n), encoding="utf-8")
        result = CliRunner().invoke(app, ["validate", str(path)])
        assert result.exit_code == code, result.output
    message = (
        f"[dpsgd] trials = {trials} models per arm are too few for any ε lower bound above 0 "
        f"at confidence 0.95 (threshold = '{threshold}'): at least {needed} are needed even "
        "for a perfect attack"
    )
    result = CliRunner().invoke(app, ["validate", str(tmp_path / f"few-{trials}.toml")])
    assert message in " ".join(result.output.split())
