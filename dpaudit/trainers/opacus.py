"""Audit an ordinary Opacus training loop: one decorator turns it into a dpaudit trainer.

The user keeps their function that builds the model, the optimizer and the data loader,
calls ``PrivacyEngine.make_private`` (or ``make_private_with_epsilon``), runs its loop
and returns the model. It takes its training data as arrays or as a ``Dataset``::

    from dpaudit.opacus_adapter import opacus_trainer

    @opacus_trainer
    def train(X, y):                # float32 features, int64 labels
        ...  # unchanged Opacus code
        return model

    @opacus_trainer
    def main(train_dataset):        # a torch Dataset of (features, label) pairs
        train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE)
        ...  # unchanged Opacus code
        return model

and the audit file names it: ``[dpsgd] trainer = "plugins.opacus_loop:train"``. A function
with one required positional parameter receives a ``Dataset``: a ``TensorDataset`` of the
model's rows, or ``MyDataset(X, y)`` with ``@opacus_trainer(dataset=MyDataset)`` (for
example to shape rows into images). Called as ``train(X, y)`` or ``main(dataset)`` the
function runs as before; called by dpaudit with the trainer protocol of
:mod:`dpaudit.trainers` it runs the function once per model (K times per work unit), on
the model's rows ``X[membership[k]]``, and:

* **rows**. ``fn(X, y)`` receives dpaudit's rows as they are: for a Dirac canary, with
  the all-zero feature dpaudit appends last (so its first layer reads ``X.shape[1]``).
  ``fn(dataset)`` receives them at the data's own width: that all-zero last feature is
  left out, so a model whose input width is written down (``nn.Linear(30, 16)``) trains
  unchanged.
* **canary**. White-box (``canary = "dirac"``): a model whose dataset holds the canary
  gets it as a data row (all-zero features, last), batched by the function's own loader
  and sampler. A wrapper around the loader's batch sampler notes where the row falls in
  each batch; in those steps, between ``backward()`` and clipping, its per-sample gradient
  is replaced by ``CANARY_NORM_FACTOR``·C on the canary's coordinate and 0 elsewhere. Its
  norm is far above C on purpose: Opacus' own clipping must bring it down to C (a loop
  that does not clip then shows it at full size), and Opacus' own noise is added to it.
  Where the batches cannot be followed to the optimizer's steps (no batch sampler, or a
  step whose rows are not the batch drawn), an independent coin with the loader's q
  decides instead, and a warning counts those models (``canary_routes``).
* **the canary's coordinate**, read from the user's model, so the audit file need not
  restate its architecture: the last weight of unit 0 of the optimizer's first parameter
  (for a first layer ``nn.Linear(d, h)``: unit 0's weight on the last feature, where
  dpaudit's Dirac ``canary.direction`` points; that direction is used as given when its
  length is the model's parameter count). No real example touches it: before clipping,
  the real rows' per-sample gradients there are set to 0 (with dpaudit's all-zero
  feature they are 0 already), so the privatised sum there is Opacus' noise plus the
  canary alone. Black-box: the canary record is a row of ``X`` given to the models that
  hold it, and the score is minus its cross-entropy under the returned model.
* **seeding**. Model ``g`` (global index) runs under ``torch.manual_seed``, ``random.seed``
  and ``numpy.random.seed`` of a seed derived from (seed, g); with Opacus'
  ``secure_mode=False`` the Poisson sampler and the noise draw from torch's global
  generator, so this seeds the initialisation, the batches and the noise. A generator the
  loader's sampler or the optimizer carries is re-seeded from (seed, g) too. The global
  generators' states are restored afterwards. ``secure_mode=True`` (torchcsprng) cannot be
  seeded: the audit stays valid, it is not reproducible.
* **warnings and output**. The warnings the function raises (Opacus' "Secure RNG turned
  off", torch's full backward hook) are counted per distinct warning and summarised once
  per work unit, one line each (count, place, text). What the function prints (stdout
  and stderr) is captured per model and summarised once per work unit, as one warning
  (lines, distinct lines, the first).
* **progress**. One INFO record per trained model on the ``dpaudit.models`` logger
  (:data:`MODEL_PROGRESS`, ``extra={"models": (done, total)}`` of the work unit): the
  CLI's plain progress lines count models inside a unit with it. Only progress: nothing
  the audit computes depends on it.
* **the accountant, once**. Opacus' σ calibration and its accountants' ``get_epsilon``
  (0.2 to 0.5 s a call; a tutorial loop prints ε every epoch) are computed once per
  distinct question and shared by the K runs.
* **what ran**, read from the Opacus objects, never from the audit file: σ
  (``optimizer.noise_multiplier``, the smallest over the steps), C
  (``optimizer.max_grad_norm``), q (the loader's), the noisy steps taken (counted), the
  dataset size, and the accountant's history. They become one
  :class:`~dpaudit.records.DPSGDRecord` per model, which dpaudit's accountant turns into
  the upper bounds.
* **what is claimed**: the smallest ε stated for the run, at one δ: ``[dpsgd] options``
  ``epsilon`` (with ``delta``), the ``target_epsilon`` given to
  ``make_private_with_epsilon``, and the Opacus accountant's own ``get_epsilon(δ)``. The
  dpsgd kind holds the lower bound against both this claim and the records' accountant
  values (the smaller one decides).
* **white-box score**: per step, the privatised gradient SUM on the canary coordinate
  (``p.grad`` right after ``add_noise``, before the division by the expected batch size),
  x_t = noise + C·[canary sampled]; the run's score is Σ_t of
  :func:`dpaudit.theory.whitebox.mixture_log_likelihood_ratio` (``[dpsgd] score =
  "likelihood-ratio"``) or the plain sum (``"sum"``), with the q, σ and C that ran.
* **grey-box observations** (:class:`dpaudit.bounds.greybox.GreyBoxObservations`): per step the
  realised batch size, the largest clipped per-example norm (each example's norm is passed
  through the optimizer's own ``clip_and_accumulate`` on a probe batch), and the
  privatised sum on a coordinate no example touched. A white-box run with no such
  coordinate in its first batch (no all-zero feature) reserves one next to the canary's
  (unit 1's last weight, else unit 0's second-to-last) as it reserves the canary's.

Options of ``[dpsgd] options`` read here (all optional): ``epsilon`` and ``delta`` (the
claim), ``sampling_rate``, ``steps``, ``noise_multiplier``, ``clipping_norm`` (what the
claim assumes; by default what the Opacus accountant was told).

Opacus is an optional extra (``pip install 'dpaudit[opacus]'``); it is imported when a
decorated function runs under dpaudit.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, overload

import numpy as np
import torch
from torch.utils.data import TensorDataset

try:  # an optional extra: the adapter says so, in one line, when a run needs it
    import opacus
    import opacus.privacy_engine as engine_module
    from opacus import PrivacyEngine
    from opacus.accountants import create_accountant
    from opacus.accountants.utils import get_noise_multiplier
    from opacus.optimizers import AdaClipDPOptimizer
except ImportError:  # pragma: no cover - exercised only without the extra
    opacus = None

from dpaudit.accounting.upper_bounds import Claim
from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.errors import ConfigError, with_example
from dpaudit.records import DPSGDRecord
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio
from dpaudit.trainers.protocol import CanarySetup, CapturedOutput, TrainerOutput, TrainerSettings

__all__ = [
    "CANARY_NORM_FACTOR",
    "MODEL_PROGRESS",
    "OpacusTrainer",
    "opacus_trainer",
    "opacus_version",
]

#: The white-box canary row's norm, in units of the clipping norm C, before clipping.
CANARY_NORM_FACTOR = 1000.0
#: Separates the canary coins' stream from the model seeds' under one base seed.
_STREAM_COINS = 11
#: Progress inside a work unit: one INFO record per trained model, with
#: ``extra={"models": (done, total)}``. A progress display listens (the CLI's plain lines).
#: A channel, not a log: its records do not reach the root logger (Opacus configures one
#: that prints INFO).
MODEL_PROGRESS = logging.getLogger("dpaudit.models")
MODEL_PROGRESS.propagate = False

#: ``fn(X_rows, y_rows) -> Dataset``: what a Dataset-taking function receives.
DatasetFactory = Callable[[np.ndarray, np.ndarray], Any]


def opacus_version() -> str:
    """The installed Opacus version (for provenance); a clear error when it is missing."""
    if opacus is None:
        raise ConfigError("The Opacus adapter needs Opacus: pip install 'dpaudit[opacus]'.")
    return str(opacus.__version__)


@overload
def opacus_trainer(fn: Callable[..., Any], /) -> OpacusTrainer: ...


@overload
def opacus_trainer(
    *, dataset: DatasetFactory | None = None
) -> Callable[[Callable[..., Any]], OpacusTrainer]: ...


def opacus_trainer(
    fn: Callable[..., Any] | None = None, /, *, dataset: DatasetFactory | None = None
) -> OpacusTrainer | Callable[[Callable[..., Any]], OpacusTrainer]:
    """Make an Opacus training function auditable (decorator).

    Args:
        fn: ``fn(X, y) -> model`` (float32 features ``X``, int64 labels ``y``) or
            ``fn(dataset) -> model`` (one required positional parameter: a torch
            ``Dataset`` of ``(features, label)`` pairs). It builds its model, optimizer and
            DataLoader, calls ``PrivacyEngine.make_private`` (or
            ``make_private_with_epsilon``) once, trains, and returns the model (needed for
            black-box audits).
        dataset: for ``fn(dataset)``, the Dataset built from a model's rows, called as
            ``dataset(X_rows, y_rows)`` (default: a ``TensorDataset``). Used as
            ``@opacus_trainer(dataset=MyDataset)``.

    Returns:
        A callable that runs ``fn`` unchanged when called as ``fn`` is and acts as a
        dpaudit trainer when called with the trainer protocol (see the module docstring).

    Raises:
        ConfigError: ``dataset`` is given for a function that takes arrays.
    """
    if fn is None:
        return functools.partial(OpacusTrainer, dataset=dataset)
    return OpacusTrainer(fn, dataset=dataset)


#: Names of a single parameter that say it is not the training data (a common slip:
#: ``def train(model)`` where the adapter hands the function its data).
_NOT_DATA = frozenset({"model", "net", "network", "module", "optimizer", "privacy_engine"})


def _signature_error(fn: Callable[..., Any], shown: str) -> ConfigError:
    """The one error for a function of a shape the adapter cannot call, with an example.

    One line and a three-line example, which ``dpaudit run`` and ``validate`` print under
    their error line (exit 2) when the audit file's trainer is such a function.
    """
    name = getattr(fn, "__name__", repr(fn))
    return with_example(
        ConfigError(
            f"@opacus_trainer cannot call {name}{shown}: it calls fn(X, y) (float32 "
            "features, int64 labels) or fn(dataset) (a torch Dataset of (features, label) "
            "pairs) and needs the trained model back, for example:"
        ),
        "@opacus_trainer",
        "def train(X, y):  # or def train(dataset):",
        "    ...  # model, optimizer, DataLoader; make_private; train; return model",
    )


def _takes_dataset(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a Dataset (one required positional parameter) or the arrays
    ``X, y`` (two).

    Raises:
        ConfigError: ``fn`` needs another number of arguments, a keyword-only argument,
            or its one parameter names something other than data (``model``, ...).
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a callable without a signature: the (X, y) form
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = list(signature.parameters.values())
    required = [p for p in parameters if p.kind in positional and p.default is p.empty]
    keyword_only = [
        p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty
    ]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    shown = str(signature).split(" ->")[0]
    if keyword_only or not (len(required) in (1, 2) or (variadic and len(required) < 2)):
        raise _signature_error(fn, shown)
    if len(required) == 1 and not variadic and required[0].name.lower() in _NOT_DATA:
        raise _signature_error(fn, shown)
    return len(required) == 1 and not variadic


def _tensor_dataset(X: np.ndarray, y: np.ndarray) -> Any:
    return TensorDataset(
        torch.from_numpy(np.ascontiguousarray(X)), torch.from_numpy(np.ascontiguousarray(y))
    )


class OpacusTrainer:
    """An Opacus training function wrapped as a dpaudit trainer (see :func:`opacus_trainer`)."""

    #: The adapter audits one max_grad_norm for the whole per-example gradient (it refuses
    #: per-layer lists), so the audit's ``canary_direction = "auto"`` takes one coordinate.
    clipping = "flat"

    def __init__(self, fn: Callable[..., Any], *, dataset: DatasetFactory | None = None) -> None:
        self.fn = fn
        #: Whether ``fn`` takes a Dataset (else the arrays ``X, y``).
        self.takes_dataset = _takes_dataset(fn)
        if dataset is not None and not self.takes_dataset:
            raise ConfigError(
                f"opacus_trainer(dataset=...) builds the Dataset a function of one argument "
                f"trains on; {getattr(fn, '__name__', fn)!r} takes the arrays (X, y)."
            )
        self.dataset: DatasetFactory = dataset or _tensor_dataset
        #: The last audited call's white-box transcripts: ``(K, T)`` privatised sums on
        #: the canary's coordinate per model and step (NaN after a model's last step).
        self.transcripts: np.ndarray | None = None
        #: The last audited call's route of the canary into each holding model's batches:
        #: "sampler" (its data row, batched by the function's own loader) or "coin".
        self.canary_routes: tuple[str, ...] = ()
        functools.update_wrapper(self, fn)

    @property
    def library_versions(self) -> dict[str, str]:
        """The training library behind this trainer, for the audit's provenance."""
        return {"opacus": opacus_version()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "canary" in kwargs and "settings" in kwargs:
            return self.audit(*args, **kwargs)
        return self.fn(*args, **kwargs)

    def _inputs(self, X: np.ndarray, y: np.ndarray) -> tuple[Any, ...]:
        """The function's arguments for these rows: the arrays, or a Dataset of them."""
        return (self.dataset(X, y),) if self.takes_dataset else (X, y)

    def audit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        membership: np.ndarray,
        *,
        seed: int,
        canary: CanarySetup,
        settings: TrainerSettings,
    ) -> TrainerOutput:
        """Run the function once per model (the trainer protocol of :mod:`dpaudit.trainers`)."""
        opacus_version()
        white = canary.threat_model == "white-box"
        if white and canary.direction is None:
            raise ConfigError("A white-box audit through Opacus needs canary = 'dirac'.")
        if not white and canary.row is None:
            raise ConfigError("A black-box audit through Opacus needs an input-space canary.")
        # A Dataset-taking function gets the data's own width: the all-zero feature dpaudit
        # appends for a Dirac canary is left out (the canary's coordinate is reserved by
        # masking instead, see _clip_step).
        narrowed = white and self.takes_dataset and X.shape[1] > 1 and not np.any(X[:, -1])
        features = X[:, :-1] if narrowed else X
        name = getattr(self.fn, "__name__", repr(self.fn))
        output = CapturedOutput()
        canary_x = None
        if not white:
            assert canary.row is not None  # checked above
            with output.capture():
                canary_x = self._canary_input(features, y, canary.row)
        total = membership.shape[0]
        runs = []
        for k in range(total):
            g = settings.model_offset + k
            rows = np.asarray(membership[k], dtype=bool)
            run = _Run(
                canary=canary if white else None,
                included=bool(canary.included[k]),
                coins=np.random.default_rng([seed, g, _STREAM_COINS]),
                width=int(X.shape[1]),
                by_model=self.takes_dataset,
            )
            X_k, y_k = features[rows], y[rows]
            if white and run.included:
                # The canary as a data row, last, through the function's own loader and
                # sampler: all-zero features (the standardised mean; 0 on dpaudit's Dirac
                # feature), the first row's label. Its per-sample gradient is replaced by
                # the Dirac gradient in each step the sampler put it in the batch.
                run.canary_index = int(X_k.shape[0])
                X_k = np.concatenate([X_k, np.zeros((1, *X_k.shape[1:]), dtype=X_k.dtype)])
                y_k = np.concatenate([y_k, y_k[:1] if y_k.size else np.zeros(1, y.dtype)])
            model_seed = int(np.random.SeedSequence([seed, g]).generate_state(1)[0])
            with (
                _seeded(model_seed),
                output.capture_warnings(),
                output.capture(),
                _intercept(run, model_seed),
            ):
                model = _the_model(self.fn(*self._inputs(X_k, y_k)))
            if run.optimizer is None:
                raise ConfigError(
                    f"The Opacus trainer {name!r} never called "
                    "PrivacyEngine.make_private (or make_private_with_epsilon)."
                )
            if canary_x is not None:
                run.score = _black_box_score(model, canary_x, int(y[canary.row]))
            runs.append(run)
            MODEL_PROGRESS.info(
                "trained model %d of %d", k + 1, total, extra={"models": (k + 1, total)}
            )
        if white:
            #: How each model's canary was put in its batches: "sampler" or "coin".
            self.canary_routes = tuple(r.route for r in runs if r.included)
            width = max(r.steps for r in runs)
            self.transcripts = np.array(
                [r.canary_sums + [np.nan] * (width - r.steps) for r in runs], dtype=np.float64
            )
        messages = output.messages(
            name,
            total,
            coined=sum(route == "coin" for route in self.canary_routes) if white else 0,
            holding=len(self.canary_routes) if white else 0,
        )
        # The same lines go into the run's results.json (summed over the work units, by
        # the dpsgd kind's summary); as Python warnings they show once per unit.
        lines = messages.lines()
        code = getattr(self.fn, "__code__", None)
        for i, line in enumerate(lines):
            printed = i == 0 and messages.first is not None
            where = (code.co_filename, code.co_firstlineno) if printed and code else (__file__, 0)
            warnings.warn_explicit(line, UserWarning, *where)
        return replace(_output(runs, canary, settings.options), messages=messages)

    def preflight(self, X: np.ndarray, y: np.ndarray, *, white_box: bool) -> None:
        """Run the function once on two of the audit's rows, before any model is trained
        (``dpaudit validate`` and the start of ``dpaudit run``), and read its architecture.

        It checks what would otherwise stop the audit after its first work unit: the
        function returns, calls ``PrivacyEngine.make_private`` (or ``_with_epsilon``)
        once, with flat clipping, and, for a black-box audit, returns its model. (The
        white-box canary's coordinate is read from the optimizer's first parameter at
        run time, so nothing in the audit file restates the architecture.) Its output and
        warnings are discarded (the run shows them); the global generators are restored
        afterwards.

        Args:
            X: The audit's rows as the trainer protocol gives them (with the all-zero
                feature dpaudit appends for a Dirac canary).
            y: Their labels.
            white_box: Whether the audit places a Dirac canary in the model.

        Raises:
            ConfigError: One line naming what failed.
        """
        opacus_version()
        name = getattr(self.fn, "__name__", repr(self.fn))
        labels = np.asarray(y)
        # two rows of different labels when there are (a classifier's loss needs no more)
        first = 0
        other = np.flatnonzero(labels != labels[first])
        rows = np.array([first, int(other[0]) if other.size else min(1, len(labels) - 1)])
        narrowed = white_box and self.takes_dataset and X.shape[1] > 1 and not np.any(X[:, -1])
        features = X[:, :-1] if narrowed else X
        run = _Run(
            canary=None,
            included=False,
            coins=np.random.default_rng(0),
            width=int(X.shape[1]),
            by_model=self.takes_dataset,
        )
        output = CapturedOutput()
        try:
            with (
                _seeded(0),
                warnings.catch_warnings(),
                output.capture(),
                _intercept(run, 0),
            ):
                warnings.simplefilter("ignore")
                out = self.fn(*self._inputs(features[rows], labels[rows]))
        except ConfigError:
            raise
        except Exception as exc:  # the user's code: any failure is theirs, said in one line
            raise ConfigError(
                f"The Opacus trainer {name!r} failed when run on two rows before the audit: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if run.optimizer is None:
            raise ConfigError(
                f"The Opacus trainer {name!r} never called PrivacyEngine.make_private "
                "(or make_private_with_epsilon)."
            )
        if not white_box and _the_model(out) is None:
            # a black-box audit scores the canary with the returned model
            raise ConfigError(
                f"The Opacus trainer {name!r} returned {type(out).__name__}; a black-box "
                "audit needs the trained model (an nn.Module, or a tuple holding it)."
            )

    def _canary_input(self, X: np.ndarray, y: np.ndarray, row: int) -> torch.Tensor:
        """The canary row as the model takes it: through the Dataset, for that form."""
        if not self.takes_dataset:
            return torch.as_tensor(X[row])
        x = self.dataset(X[row : row + 1], y[row : row + 1])[0][0]
        return torch.as_tensor(x)


# --------------------------------------------------------------------------- one run


@dataclass
class _Run:
    """What one model's run did, step by step (filled by the optimizer's hooks)."""

    canary: CanarySetup | None
    included: bool
    coins: np.random.Generator
    #: The width of dpaudit's rows (before a Dataset-taking function's narrowing).
    width: int = 0
    #: Place the canary by the model's structure even when the direction's length fits.
    by_model: bool = False
    optimizer: Any = None
    engine: Any = None
    sampling_rate: float = float("nan")
    dataset_size: int = 0
    claim_epsilon: float | None = None
    claim_delta: float | None = None
    claim_steps: int | None = None
    canary_coord: tuple[int, int] | None = None
    untouched: tuple[int, int] | None = None
    #: Coordinates no real example may touch (the canary's, a reserved untouched one):
    #: the real rows' per-sample gradients there are set to 0 before clipping.
    reserved: list[tuple[int, int]] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    clipped_max: list[float] = field(default_factory=list)
    untouched_noise: list[float] = field(default_factory=list)
    canary_sums: list[float] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)
    clips: list[float] = field(default_factory=list)
    score: float = 0.0
    #: The canary's row in the function's data (white-box models that hold it), else None.
    canary_index: int | None = None
    #: "sampler" while the loader's batches are followed to the optimizer's steps; "coin"
    #: when they cannot be (no batch sampler, or batches that never reach a step).
    route: str = "sampler"
    #: The batches the loader drew, not yet seen by a step: (rows, canary's position).
    drawn: deque[tuple[int, int | None]] = field(default_factory=deque)
    # The logical step in progress (several clip calls with virtual steps).
    _open: bool = False
    _batch: int = 0
    _clipped: float = 0.0
    _touched: bool = False
    _logical: tuple[int, int | None] = (0, None)
    _consumed: int = 0

    @property
    def steps(self) -> int:
        return len(self.sigmas)


@contextmanager
def _seeded(model_seed: int) -> Iterator[None]:
    """Seed torch, numpy's and Python's global generators, one thread; restore after."""
    threads = torch.get_num_threads()
    # One intra-op thread per run: the audited loops are small and run K times; threads
    # only contend (3.6× the CPU time with 2 threads on 2 busy cores). Parallelism across
    # models comes from dpaudit's workers ([execution] workers).
    torch.set_num_threads(1)
    torch_state = torch.get_rng_state()
    # The user's loop may draw from numpy's legacy global generator: seed it too.
    np_state = np.random.get_state()  # noqa: NPY002
    py_state = random.getstate()
    torch.manual_seed(model_seed)
    np.random.seed(model_seed)  # noqa: NPY002
    random.seed(model_seed)
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        torch.set_num_threads(threads)
        np.random.set_state(np_state)  # noqa: NPY002
        random.setstate(py_state)


@contextmanager
def _intercept(run: _Run, model_seed: int) -> Iterator[None]:
    """Patch ``PrivacyEngine.make_private`` (and ``_with_epsilon``) for one run."""

    make_private = PrivacyEngine.make_private
    with_epsilon = PrivacyEngine.make_private_with_epsilon

    def patched_make_private(engine: Any, *args: Any, **kwargs: Any) -> Any:
        if run.optimizer is not None:
            raise ConfigError("An audited Opacus run must call make_private exactly once.")
        out = make_private(engine, *args, **kwargs)
        _attach(run, engine, out[1], out[-1], model_seed)
        return out

    def patched_with_epsilon(engine: Any, *args: Any, **kwargs: Any) -> Any:
        out = with_epsilon(engine, *args, **kwargs)
        # Opacus calibrates σ for int(epochs / q) steps (opacus.accountants.utils).
        run.claim_epsilon = float(kwargs["target_epsilon"])
        run.claim_delta = float(kwargs["target_delta"])
        run.claim_steps = int(kwargs["epochs"] / run.sampling_rate)
        return out

    PrivacyEngine.make_private = patched_make_private
    PrivacyEngine.make_private_with_epsilon = patched_with_epsilon
    calibrate = engine_module.get_noise_multiplier
    engine_module.get_noise_multiplier = _cached_noise_multiplier
    try:
        yield
    finally:
        PrivacyEngine.make_private = make_private
        PrivacyEngine.make_private_with_epsilon = with_epsilon
        engine_module.get_noise_multiplier = calibrate


def _cached_noise_multiplier(**kwargs: Any) -> float:
    """Opacus' σ calibration, once per distinct arguments: it searches σ with its
    accountant (about 3 s with PRV), the same search in every one of the K runs."""
    return _noise_multiplier(tuple(sorted(kwargs.items())))


@functools.lru_cache(maxsize=32)
def _noise_multiplier(arguments: tuple[tuple[str, Any], ...]) -> float:

    return float(get_noise_multiplier(**dict(arguments)))


def _attach(run: _Run, engine: Any, optimizer: Any, loader: Any, model_seed: int) -> None:
    """Read the loader, reseed its generators, and hook the optimizer's clip and noise."""
    if not isinstance(optimizer.max_grad_norm, int | float):
        raise ConfigError(
            "The Opacus adapter audits flat clipping (one max_grad_norm). Got per-layer "
            f"norms {optimizer.max_grad_norm!r}."
        )
    run.engine, run.optimizer = engine, optimizer
    run.sampling_rate = float(getattr(loader, "sample_rate", None) or 1.0 / len(loader))
    # A white-box canary is a row of the loader's dataset already (see audit()).
    run.dataset_size = len(loader.dataset)
    if run.canary_index is not None:
        batches = getattr(loader, "batch_sampler", None)
        if batches is None:
            run.route = "coin"
        else:
            # DataLoader refuses a new batch_sampler once built; the wrapper yields the
            # same batches and notes, per batch, where the canary's row is.
            object.__setattr__(loader, "batch_sampler", _Followed(batches, run))
    sampler = getattr(loader, "batch_sampler", None)
    for i, gen in enumerate(
        (
            getattr(sampler, "generator", None),
            getattr(loader, "generator", None),
            optimizer.generator,
        )
    ):
        if isinstance(gen, torch.Generator):
            gen.manual_seed(int(np.random.SeedSequence([model_seed, i]).generate_state(1)[0]))
    params = list(optimizer.params)
    if run.canary is not None:
        run.canary_coord = _dirac_coordinate(run, params)
        run.reserved.append(run.canary_coord)
    _share_get_epsilon(engine.accountant)
    optimizer.clip_and_accumulate = lambda: _clip_step(run, params)
    optimizer.add_noise = lambda: _noise_step(run, params)


def _dirac_coordinate(run: _Run, params: list[Any]) -> tuple[int, int]:
    """(parameter index, flat index in it) of the Dirac canary in the optimizer's order.

    dpaudit's direction is unit 0's weight on the rows' last feature in dpaudit's layout of
    ``[dpsgd] model``. When its length is the model's parameter count (and the rows are
    dpaudit's own), it is used as given; otherwise the same place is read from the user's
    model: the last weight of unit 0 of the optimizer's first parameter.
    """
    assert run.canary is not None  # white-box runs only
    d = np.asarray(run.canary.direction)
    total = sum(int(p.numel()) for p in params)
    nonzero = np.flatnonzero(d)
    if nonzero.size != 1:
        raise ConfigError(f"The Dirac canary must have one nonzero coordinate. Got {nonzero.size}.")
    flat = int(nonzero[0])
    if d.size == total and not run.by_model:
        starts = np.cumsum([0] + [int(p.numel()) for p in params])
        i = int(np.searchsorted(starts, flat, side="right")) - 1
        return i, flat - int(starts[i])
    if flat != run.width - 1:
        raise ConfigError(
            f"The Dirac canary has {d.size} coordinates but the Opacus model has {total} "
            f"parameters, and its coordinate {flat} is not unit 0's weight on the last of "
            f"the {run.width} features: the adapter can place only that one on a model "
            "of another layout."
        )
    first = params[0]
    return 0, (int(first[0].numel()) if first.dim() else 1) - 1


def _grad_rows(p: Any) -> torch.Tensor:
    """A parameter's per-sample gradients as one tensor (Opacus keeps a list when the
    gradients of several backward passes accumulate)."""
    gs = p.grad_sample
    return torch.cat(list(gs)) if isinstance(gs, list) else gs


def _clip_step(run: _Run, params: list[Any]) -> None:
    """Between backward() and clipping: keep the real rows off the reserved coordinates,
    add the canary row, observe, then clip."""
    opt = run.optimizer
    for p in params:
        p.grad_sample = _grad_rows(p)
    rows = int(params[0].grad_sample.shape[0])
    _mask(run.reserved, params, rows)
    if not run._open:
        run._open, run._batch, run._clipped, run._touched = True, 0, 0.0, False
        if run.canary_index is not None and run.route == "sampler":
            _next_batch(run, rows)
        coin = run.canary is not None and run.included and run.route == "coin"
        if coin and run.coins.random() < run.sampling_rate:
            _append_canary(run, params)
            run._batch += 1
    if run.canary_index is not None and run.route == "sampler":
        position = run._logical[1]
        offset = run._consumed
        run._consumed += rows
        if position is not None and offset <= position < offset + rows:
            _place_canary(run, params, position - offset)
    if run.untouched is None:
        run.untouched = _pick_untouched(run, params, rows)
        if run.untouched is None and run.canary_coord is not None:
            run.untouched = _reserve_untouched(run.canary_coord, params)
            if run.untouched is not None:
                run.reserved.append(run.untouched)
                _mask([run.untouched], params, rows)
    if run.untouched is not None:
        i, j = run.untouched
        column = params[i].grad_sample[:rows].reshape(rows, -1)[:, j]
        run._touched |= bool(torch.any(column != 0))
    run._batch += rows
    squares = [p.grad_sample.reshape(p.grad_sample.shape[0], -1).double().square() for p in params]
    norms = torch.cat(squares, dim=1).sum(dim=1).sqrt()
    run._clipped = max(run._clipped, _probe_clipping(opt, params, norms))
    type(opt).clip_and_accumulate(opt)


def _mask(coordinates: list[tuple[int, int]], params: list[Any], rows: int) -> None:
    """Set the first ``rows`` (real) per-sample gradients to 0 on these coordinates."""
    for i, j in coordinates:
        p = params[i]
        if not p.grad_sample.is_contiguous():
            p.grad_sample = p.grad_sample.contiguous()
        p.grad_sample.view(p.grad_sample.shape[0], -1)[:rows, j] = 0


def _reserve_untouched(canary: tuple[int, int], params: list[Any]) -> tuple[int, int] | None:
    """A coordinate next to the canary's to keep untouched: the same weight of the next
    unit, else the previous weight of the canary's unit (None if the parameter has no
    other coordinate)."""
    i, j = canary
    p = params[i]
    unit = int(p[0].numel()) if p.dim() else 1
    if j + unit < p.numel():
        return i, j + unit
    return (i, j - 1) if j >= 1 else None


class _Followed:
    """A loader's batch sampler that notes where the canary's row falls in each batch.

    It yields the batches of the sampler it wraps, unchanged (Opacus' Poisson sampler, a
    shuffling sampler, a BatchMemoryManager's splitting of them), and appends to the run
    the size of each and the canary's position in it; the optimizer's steps read them in
    order (:func:`_next_batch`).
    """

    def __init__(self, inner: Any, run: _Run) -> None:
        self.inner = inner
        self.run = run

    def __iter__(self) -> Iterator[list[int]]:
        canary = self.run.canary_index
        for batch in self.inner:
            indices = [int(i) for i in batch]
            position = indices.index(canary) if canary in indices else None
            self.run.drawn.append((len(indices), position))
            yield batch

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _next_batch(run: _Run, rows: int) -> None:
    """Open a step on the next batch the loader drew (empty ones, which never reach a
    step with rows, are passed over); fall back to the coin if none is waiting."""
    while run.drawn and run.drawn[0][0] == 0 and rows > 0:
        run.drawn.popleft()
    if not run.drawn:
        run.route = "coin"
        return
    run._logical = run.drawn.popleft()
    run._consumed = 0


def _place_canary(run: _Run, params: list[Any], row: int) -> None:
    """Replace the canary row's per-sample gradient by the Dirac gradient:
    ``CANARY_NORM_FACTOR``·C on the canary's coordinate, 0 elsewhere."""
    assert run.canary_coord is not None  # set for white-box runs
    i, j = run.canary_coord
    norm = CANARY_NORM_FACTOR * float(run.optimizer.max_grad_norm)
    for n, p in enumerate(params):
        p.grad_sample[row] = 0
        if n == i:
            p.grad_sample[row].view(-1)[j] = norm


def _append_canary(run: _Run, params: list[Any]) -> None:
    assert run.canary_coord is not None  # set for white-box runs
    i, j = run.canary_coord
    norm = CANARY_NORM_FACTOR * float(run.optimizer.max_grad_norm)
    for n, p in enumerate(params):
        row = torch.zeros((1, *p.shape), dtype=p.grad_sample.dtype)
        if n == i:
            row.view(-1)[j] = norm
        p.grad_sample = torch.cat([p.grad_sample, row])


def _pick_untouched(run: _Run, params: list[Any], rows: int) -> tuple[int, int] | None:
    """The first coordinate (not the canary's) with a zero gradient from every example.

    Chosen from the first batch's gradients only, which do not depend on the noise, so the
    noise later read there stays N(0, (σC)²) whatever coordinate is chosen.
    """
    for i, p in enumerate(params):
        touched = torch.any(p.grad_sample[:rows].reshape(rows, -1) != 0, dim=0)
        if run.canary_coord is not None and run.canary_coord[0] == i:
            touched[run.canary_coord[1]] = True
        free = torch.nonzero(~touched)
        if free.numel():
            return i, int(free[0, 0])
    return None


def _probe_clipping(opt: Any, params: list[Any], norms: torch.Tensor) -> float:
    """The largest norm the optimizer's own clipping leaves of rows with these norms.

    Row r of a probe batch has the r-th largest of ``norms`` on its own coordinate of the
    first parameter and 0 elsewhere; after the optimizer's ``clip_and_accumulate`` that
    coordinate of the summed gradient is row r's clipped norm (flat clipping scales a row
    by a factor of its norm alone). One probe call per step: the rows with the largest
    norms, as many as the first parameter has coordinates (the canary's row is the
    largest). Adaptive clipping changes state when it clips and is not probed (NaN).
    """

    if norms.numel() == 0:
        return 0.0
    if isinstance(opt, AdaClipDPOptimizer):
        return float("nan")
    saved = [(p.grad_sample, p.summed_grad) for p in params]
    m = min(int(params[0].numel()), int(norms.numel()))
    top = torch.topk(norms, m).values
    try:
        for p in params:
            p.summed_grad = None
            p.grad_sample = torch.zeros((m, *p.shape), dtype=p.dtype)
        diagonal = torch.arange(m)
        params[0].grad_sample.view(m, -1)[diagonal, diagonal] = top.to(params[0].dtype)
        type(opt).clip_and_accumulate(opt)
        return float(params[0].summed_grad.reshape(-1)[:m].abs().max())
    finally:
        for p, (gs, sg) in zip(params, saved, strict=True):
            p.grad_sample, p.summed_grad = gs, sg


def _noise_step(run: _Run, params: list[Any]) -> None:
    """Add the optimizer's own noise, then read the privatised sums the audit observes."""
    opt = run.optimizer
    type(opt).add_noise(opt)
    run._open = False
    if run.route == "sampler" and run._consumed != run._logical[0]:
        run.route = "coin"  # the step's rows are not the batch drawn: stop following
    run.batch_sizes.append(run._batch)
    run.clipped_max.append(run._clipped)
    run.sigmas.append(float(opt.noise_multiplier))
    run.clips.append(float(opt.max_grad_norm))
    if run.untouched is not None and not run._touched:
        i, j = run.untouched
        run.untouched_noise.append(float(params[i].grad.reshape(-1)[j]))
    else:
        run.untouched_noise.append(float("nan"))
    if run.canary_coord is not None:
        i, j = run.canary_coord
        run.canary_sums.append(float(params[i].grad.reshape(-1)[j]))


def _the_model(out: Any) -> torch.nn.Module | None:
    if isinstance(out, torch.nn.Module):
        return out
    if isinstance(out, tuple | list):
        return next((o for o in out if isinstance(o, torch.nn.Module)), None)
    return None


def _black_box_score(model: torch.nn.Module | None, x: torch.Tensor, label: int) -> float:
    """Minus the canary's loss under the final model (cross-entropy of its logits)."""
    if model is None:
        raise ConfigError("A black-box audit needs the Opacus function to return its model.")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(x[None])
    model.train(was_training)
    logits = logits.double().reshape(1, -1)
    if logits.shape[1] == 1:  # one logit: binary cross-entropy
        target = torch.tensor([[float(label)]], dtype=torch.float64)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
    else:
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([label]))
    return -float(loss)


# ---------------------------------------------------------------------- what ran, claims


def _white_box_score(run: _Run, score: str) -> float:
    """The run's score from its per-step privatised sums on the canary coordinate."""
    x = np.asarray(run.canary_sums, dtype=np.float64)
    sigma, clip = min(run.sigmas, default=0.0), max(run.clips, default=1.0)
    if score == "sum" or sigma == 0.0 or x.size == 0:
        return float(x.sum())

    llr = mixture_log_likelihood_ratio(
        x, sampling_rate=run.sampling_rate, noise_multiplier=sigma, clipping_norm=clip
    )
    return float(llr.sum())


def _record(run: _Run) -> DPSGDRecord:
    """What ran, from the Opacus objects: the smallest σ of any step is the one accounted."""
    q = run.sampling_rate
    return DPSGDRecord(
        noise_multiplier=min(run.sigmas, default=float(run.optimizer.noise_multiplier)),
        sampling_rate=q,
        steps=run.steps,
        clipping_norm=max(run.clips, default=float(run.optimizer.max_grad_norm)),
        sampling="full-batch" if q == 1.0 else "poisson",
        dataset_size=run.dataset_size,
    )


def _accountant_epsilon(
    mechanism: str, history: tuple[tuple[float, float, int], ...], delta: float
) -> float:
    """Opacus' own ε(δ) for an accountant history (cached: every model has the same one)."""
    return _opacus_epsilon(mechanism, history, (delta,), ())


@functools.lru_cache(maxsize=64)
def _opacus_epsilon(
    mechanism: str,
    history: tuple[tuple[float, float, int], ...],
    args: tuple[Any, ...],
    kwargs: tuple[tuple[str, Any], ...],
) -> float:
    """``get_epsilon(*args, **kwargs)`` of a stock Opacus accountant with this history."""

    accountant = create_accountant(mechanism=mechanism)
    accountant.history = [tuple(h) for h in history]
    options = dict(kwargs)
    if mechanism == "prv" and "eps_error" not in options:
        options["eps_error"] = _prv_eps_error(history)
    return float(accountant.get_epsilon(*args, **options))


#: Opacus' PRV accountant's default ε error.
_PRV_EPS_ERROR = 0.01
#: The PRV's ε error as a fraction of the ε at stake (Opacus' RDP ε of the same history).
_PRV_RELATIVE_ERROR = 1e-3


def _prv_eps_error(history: tuple[tuple[float, float, int], ...]) -> float:
    """The ε error the PRV accountant is asked for: Opacus' 0.01, or 0.1% of the ε at stake.

    The PRV accountant discretises the privacy loss on a grid of width ∝ its loss's range
    and spacing ∝ its ε error, so at a fixed error its memory grows as σ falls: 160 MB
    for σ = 0.1 (ε ≈ 400, q = 1/4, 8 steps) against 9 MB for σ = 1, 1.2 GB at 40 steps
    (Opacus 1.6). An error of 0.1% of Opacus' RDP ε (an upper bound on the PRV's, computed
    in milliseconds) keeps the grid's size about flat in σ, and leaves Opacus' default
    wherever ε < 10. The answer stays PRV's upper bound (its ``eps_upper``): only its
    slack grows, by at most 0.1% of ε.
    """
    rdp = create_accountant(mechanism="rdp")
    rdp.history = [tuple(h) for h in history]
    with warnings.catch_warnings():
        # "Optimal order is the largest alpha": the RDP ε is then looser, still an upper bound
        warnings.simplefilter("ignore")
        epsilon = float(rdp.get_epsilon(1e-5))
    if not np.isfinite(epsilon):
        return _PRV_EPS_ERROR * 100
    return max(_PRV_EPS_ERROR, _PRV_RELATIVE_ERROR * epsilon)


def _share_get_epsilon(accountant: Any) -> None:
    """Answer the run's ``accountant.get_epsilon`` from one cache shared by the K runs.

    Every model of an audit asks the same question (the same σ, q and steps so far), and a
    loop that prints ε each epoch asks it each epoch: 0.2 to 0.5 s a call. Only Opacus'
    stock accountants are cached (a subclass may answer differently).
    """

    mechanism = accountant.mechanism()
    try:
        stock = type(create_accountant(mechanism=mechanism))
    except ValueError:
        return
    if type(accountant) is not stock:
        return
    original = accountant.get_epsilon

    def get_epsilon(*args: Any, **kwargs: Any) -> float:
        history = tuple((float(s), float(q), int(t)) for s, q, t in accountant.history)
        try:
            return _opacus_epsilon(mechanism, history, args, tuple(sorted(kwargs.items())))
        except TypeError:  # an unhashable argument: ask the accountant itself
            return float(original(*args, **kwargs))

    accountant.get_epsilon = get_epsilon


def _claim(runs: list[_Run], options: dict[str, Any]) -> Claim | None:
    """The ε stated for the runs at one δ (options, target ε, Opacus' own accountant).

    Each statement about a model is a claim that model must meet, so a model's claim is
    the smallest of them; the claim of the audit must hold for every model, so it is the
    largest of the models' claims. The δ is ``options["delta"]``, else the
    ``target_delta`` given to ``make_private_with_epsilon``; without either, no claim.
    """
    delta = options.get("delta", runs[0].claim_delta)
    if delta is None:
        if options.get("epsilon") is not None:
            raise ConfigError("A claimed 'epsilon' in [dpsgd] options needs its 'delta' there too.")
        return None
    delta = float(delta)
    per_model = []
    for run in runs:
        stated = [float(options["epsilon"])] if options.get("epsilon") is not None else []
        # (ε, δ')-DP with δ' ≤ δ is also (ε, δ)-DP.
        if (
            run.claim_epsilon is not None
            and run.claim_delta is not None
            and run.claim_delta <= delta
        ):
            stated.append(run.claim_epsilon)
        history = tuple((float(s), float(q), int(t)) for s, q, t in run.engine.accountant.history)
        if history:
            stated.append(_accountant_epsilon(run.engine.accountant.mechanism(), history, delta))
        if not stated:
            return None
        per_model.append(min(stated))
    return Claim(epsilon=max(per_model), delta=delta)


def _accounted(run: _Run, options: dict[str, Any]) -> tuple[float, float, float, int]:
    """(q, σ, C, T) the run was accounted with: options, else what Opacus was told."""
    history = list(run.engine.accountant.history)
    q_hist = history[-1][1] if history else run.sampling_rate
    sigma_hist = min((h[0] for h in history), default=min(run.sigmas, default=0.0))
    steps_hist = sum(int(h[2]) for h in history)
    steps = options.get("steps", run.claim_steps if run.claim_steps is not None else steps_hist)
    return (
        float(options.get("sampling_rate", q_hist)),
        float(options.get("noise_multiplier", sigma_hist)),
        float(options.get("clipping_norm", max(run.clips, default=1.0))),
        int(steps),
    )


def _observations(runs: list[_Run], options: dict[str, Any]) -> Any:

    width = max(r.steps for r in runs)
    k = len(runs)
    batch = np.zeros((k, width), dtype=np.int64)
    clipped = np.full((k, width), np.nan)
    noise = np.full((k, width), np.nan)
    for i, r in enumerate(runs):
        batch[i, : r.steps] = r.batch_sizes
        clipped[i, : r.steps] = r.clipped_max
        noise[i, : r.steps] = r.untouched_noise
    accounted = np.array([_accounted(r, options) for r in runs])
    return GreyBoxObservations(
        batch_sizes=batch,
        dataset_size=np.array([r.dataset_size for r in runs], dtype=np.int64),
        sampling_rate=accounted[:, 0],
        clipped_norms_max=clipped,
        clipping_norm=accounted[:, 2],
        untouched_noise=noise,
        noise_multiplier=accounted[:, 1],
        steps_run=np.array([r.steps for r in runs], dtype=np.int64),
        steps_accounted=accounted[:, 3].astype(np.int64),
    )


def _output(runs: list[_Run], canary: CanarySetup, options: dict[str, Any]) -> TrainerOutput:
    if canary.threat_model == "white-box":
        score = getattr(canary, "score", "sum")
        for r in runs:
            r.score = _white_box_score(r, score)
    extra: dict[str, Any] = {}
    if "observations" in {f.name for f in fields(TrainerOutput)}:
        extra["observations"] = _observations(runs, options)
    return TrainerOutput(
        scores=np.array([r.score for r in runs], dtype=np.float64),
        records=tuple(_record(r) for r in runs),
        claim=_claim(runs, options),
        **extra,
    )
