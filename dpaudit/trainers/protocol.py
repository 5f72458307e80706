"""The types of the trainer protocol (documented in :mod:`dpaudit.trainers`): what a trainer
is told (:class:`CanarySetup`, :class:`TrainerSettings`), what it returns
(:class:`TrainerOutput`, checked by :func:`coerce_output`), and :class:`CapturedOutput`,
for trainers that run user code once per model, with :class:`TrainerMessages`, what that
code said, counted, for the run's warnings."""

from __future__ import annotations

import hashlib
import io
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import Claim
from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.errors import DpauditError
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.records import DPSGDRecord
from dpaudit.safe_text import one_line
from dpaudit.training import TrainingSpec

__all__ = [
    "CanarySetup",
    "CapturedOutput",
    "Trainer",
    "TrainerMessages",
    "TrainerOutput",
    "TrainerSettings",
    "coerce_output",
]


@dataclass(frozen=True)
class CanarySetup:
    """What a trainer is told about the canary.

    Attributes:
        kind: ``"mislabeled"``, ``"ood"``, ``"clipbkd"`` or ``"dirac"``.
        threat_model: ``"black-box"`` (the audit scores the final models) or
            ``"white-box"`` (the trainer returns a score of the privatised updates'
            projections on ``direction``, the one ``score`` names).
        included: ``(K,)`` whether each model's dataset holds the canary.
        row: the canary's row in ``X`` for input-space canaries, else ``None``.
        direction: ``(P,)`` the gradient canary in flat parameter order (unit norm), else
            ``None``: the one-hot Dirac canary, or (``[dpsgd] canary_direction``) a part in
            every parameter tensor. Add it as ONE MORE EXAMPLE'S GRADIENT, a large
            multiple of ``direction``, before your clipping, and clip it with your own rule
            (flat clipping to C leaves C·direction; per-tensor clipping leaves each
            tensor's part at its bound), in the steps its Poisson coin comes up; score the
            privatised gradient's projection on ``direction``.
        score: the white-box statistic asked for (``[dpsgd] score``):
            ``"likelihood-ratio"`` (the sum over steps of
            :func:`mixture_log_likelihood_ratio`) or ``"sum"`` (the plain sum of the
            projections). Black-box audits ignore it.
        replaced: in a replace-one audit (``canary = "worst-case"``), the row the canary
            replaces: in the models without the canary only; else ``None``.
    """

    kind: str
    threat_model: str
    included: np.ndarray = field(repr=False)
    row: int | None = None
    direction: np.ndarray | None = field(default=None, repr=False)
    score: str = "likelihood-ratio"
    replaced: int | None = None


@dataclass(frozen=True)
class TrainerSettings:
    """How to train: the architecture, the optimiser and DP spec, and trainer options.

    Attributes:
        model: the architecture (logistic regression or MLP).
        training: epochs, batch size, learning rate and ``dp`` (σ, C) for the engine.
        num_classes: number of classes.
        model_offset: global index of the first model of this call (work units).
        options: trainer-specific numbers (``epsilon``, ``lam``, ``parties``, ...).
    """

    model: ModelSpec
    training: TrainingSpec
    num_classes: int
    model_offset: int = 0
    options: dict[str, Any] = field(default_factory=dict)


#: The unit arrays of :class:`TrainerMessages` (never a unit's other array names).
_MESSAGES_PREFIX = "messages_"
#: Characters of a printed line or a warning's text quoted in the run's warnings.
QUOTED = 200


@dataclass(frozen=True)
class TrainerMessages:
    """What the user code a trainer ran once per model said, counted rather than kept: its
    printed lines, the distinct Python warnings it raised, and how its white-box canary
    was put in the batches. Stored with each work unit (:meth:`to_arrays`), joined over
    the units (:meth:`from_arrays`) and written once per run into ``results.json``
    ``warnings`` (:meth:`lines`), so ``dpaudit verify`` recomputes the same lines.

    Attributes:
        function: the name of the user's function, as the lines quote it.
        runs: the runs of the function counted (one per model).
        printed: lines it printed (stdout and stderr, blank lines left out).
        first: the first printed line (``None`` when nothing was printed).
        distinct: the sorted 64-bit hashes (BLAKE2b) of the distinct printed lines, at
            most :attr:`CapturedOutput.MAX_DISTINCT`: past that, "distinct" is a lower bound.
        warnings: ``(category, message, where, count)`` per distinct warning (category
            and message), in the order first raised, at most
            :attr:`CapturedOutput.MAX_WARNINGS`.
        more_warnings: the warnings raised past those distinct ones.
        coined: white-box models whose canary was put in its steps by an independent coin
            with the loader's q, because their batches could not be followed to the
            optimizer's steps.
        holding: white-box models holding the canary (``coined`` is out of these).
    """

    function: str
    runs: int
    printed: int = 0
    first: str | None = None
    distinct: tuple[int, ...] = ()
    warnings: tuple[tuple[str, str, str, int], ...] = ()
    more_warnings: int = 0
    coined: int = 0
    holding: int = 0

    def lines(self) -> list[str]:
        """The run's warnings: what was printed (one line), each distinct warning with how
        often it was raised (one line each), and the models whose canary was coined."""
        runs = f"over {self.runs} model{'' if self.runs == 1 else 's'}"
        out = []
        if self.first is not None:
            distinct = len(self.distinct)
            more = "+" if distinct >= CapturedOutput.MAX_DISTINCT else ""
            plural = "" if self.printed == 1 else "s"
            out.append(
                f"The training function {self.function!r} printed {self.printed} line{plural} "
                f"({distinct}{more} distinct) {runs}, captured rather than shown; the first: "
                f'"{one_line(self.first, limit=QUOTED)}"'
            )
        out += [
            f"{category} raised {count} time{'' if count == 1 else 's'} {runs} at {where}, "
            f'captured rather than shown: "{one_line(message, limit=QUOTED)}"'
            for category, message, where, count in self.warnings
        ]
        if self.more_warnings:
            out.append(
                f"{self.more_warnings} more warnings {runs} past the first "
                f"{CapturedOutput.MAX_WARNINGS} distinct ones, captured rather than shown"
            )
        if self.coined:
            out.append(
                f"The Dirac canary's inclusion was decided by a coin with the loader's q in "
                f"{self.coined} of {self.holding} models that hold it: their batches could "
                f"not be followed from {self.function!r}'s DataLoader to the optimizer's "
                "steps, so the sampling that ran did not decide it."
            )
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The raw arrays a work unit stores (``messages_*`` keys): no pickled object, so a
        unit stays plain arrays under its digest."""
        p = _MESSAGES_PREFIX
        rows = [(c, m, w) for c, m, w, _ in self.warnings]
        return {
            f"{p}counts": np.array(
                [self.runs, self.printed, self.more_warnings, self.coined, self.holding],
                dtype=np.int64,
            ),
            # the first line is "" only when nothing was printed (printed lines are stripped
            # and blank ones left out)
            f"{p}text": np.array([self.function, self.first or ""], dtype=np.str_),
            f"{p}distinct": np.array(sorted(self.distinct), dtype=np.uint64),
            f"{p}warnings": np.array(rows, dtype=np.str_).reshape(len(rows), 3),
            f"{p}warning_counts": np.array([n for *_, n in self.warnings], dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, parts: Sequence[Mapping[str, np.ndarray]]) -> TrainerMessages | None:
        """Join the messages of several work units (those that stored some; ``None`` when
        none did): counts summed, the first printed line of the first unit that printed,
        distinct lines and warnings joined (one entry per distinct warning, counts summed,
        where first raised), the caps of :class:`CapturedOutput` applied to the whole."""
        p = _MESSAGES_PREFIX
        stored = [part for part in parts if f"{p}counts" in part]
        if not stored:
            return None
        counts = np.sum([np.asarray(part[f"{p}counts"]) for part in stored], axis=0)
        runs, printed, more, coined, holding = (int(c) for c in counts)
        firsts = [str(part[f"{p}text"][1]) for part in stored if str(part[f"{p}text"][1])]
        distinct: set[int] = set()
        for part in stored:
            distinct.update(int(h) for h in part[f"{p}distinct"])
        seen: dict[tuple[str, str], list[Any]] = {}
        for part in stored:
            for (category, message, where), n in zip(
                part[f"{p}warnings"].tolist(), part[f"{p}warning_counts"].tolist(), strict=True
            ):
                key = (str(category), str(message))
                if key in seen:
                    seen[key][1] += int(n)
                elif len(seen) < CapturedOutput.MAX_WARNINGS:
                    seen[key] = [str(where), int(n)]
                else:
                    more += int(n)
        return cls(
            function=str(stored[0][f"{p}text"][0]),
            runs=runs,
            printed=printed,
            first=firsts[0] if firsts else None,
            distinct=tuple(sorted(distinct)[: CapturedOutput.MAX_DISTINCT]),
            warnings=tuple((c, m, w, n) for (c, m), (w, n) in seen.items()),
            more_warnings=more,
            coined=coined,
            holding=holding,
        )


@dataclass(frozen=True)
class TrainerOutput:
    """What a trainer ran and produced.

    Attributes:
        scores: ``(K,)`` canary scores (larger = "in"), or ``None`` when ``models`` is set.
        models: the trained stack, scored black-box by the audit when ``scores`` is None.
        records: one :class:`DPSGDRecord` per model stating what was executed, or ``None``.
        claim: the (ε, δ)/μ guarantee of what ran, for trainers without a record.
        observations: what the trainer saw itself run, step by step (batch sizes, clipped
            norms, the noise on an untouched coordinate, steps), for the grey-box checks
            of :mod:`dpaudit.bounds.greybox`; ``None`` leaves those checks not evaluated.
        messages: what the user code the trainer ran said (printed lines, warnings, the
            canary's route), counted: the run's ``results.json`` ``warnings`` carry it
            once per run, summed over the work units; ``None`` when it said nothing to
            report.
    """

    scores: np.ndarray | None = field(default=None, repr=False)
    models: ModelStack | None = field(default=None, repr=False)
    records: tuple[DPSGDRecord, ...] | None = field(default=None, repr=False)
    claim: Claim | None = None
    observations: GreyBoxObservations | None = field(default=None, repr=False)
    messages: TrainerMessages | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.scores is None and self.models is None:
            raise DpauditError("A trainer must return 'scores' or 'models'. Got neither.")
        if self.records is None and self.claim is None:
            raise DpauditError(
                "A trainer must return what it ran: 'records' (DPSGDRecord per model) or "
                "'claim' (epsilon, delta, mu or rho). Got neither."
            )


Trainer = Callable[..., TrainerOutput]


class CapturedOutput:
    """What user code wrote to stdout and stderr while a trainer ran it once per model.

    A user's loop that prints its loss every epoch prints it once per model: hundreds of
    times in an audit. A trainer that runs user code per model captures each run
    (:meth:`capture`) and reports the lot once (:meth:`summary`). Lines are counted, not
    kept: the first line and the hashes of up to :attr:`MAX_DISTINCT` distinct lines are
    remembered. A run that raises writes what it printed to the real stderr first, next
    to its error. The Python warnings the runs raise (a library warning once per model)
    are counted the same way (:meth:`capture_warnings`, :meth:`warning_summaries`): one
    line per distinct warning, with how often it was raised. :meth:`messages` hands the
    counts on (:class:`TrainerMessages`), for the run's ``results.json``.
    """

    #: Distinct lines remembered; past this many, "distinct" is a lower bound.
    MAX_DISTINCT = 10_000
    #: Characters of the first line quoted in the summary.
    QUOTED = QUOTED
    #: Distinct warnings summarised one line each; past this many they are only counted.
    MAX_WARNINGS = 20

    def __init__(self) -> None:
        self.lines = 0
        self.first: str | None = None
        self._distinct: set[int] = set()
        #: (category, message) → [times raised, where first raised]; at most MAX_WARNINGS.
        self._warnings: dict[tuple[str, str], list[Any]] = {}
        self._more_warnings = 0

    @contextmanager
    def capture_warnings(self) -> Iterator[None]:
        """Capture the Python warnings one run raises (a library's warnings, once per
        model) and count them by category and message (:meth:`warning_summaries`)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                for w in caught:
                    key = (w.category.__name__, str(w.message))
                    if key in self._warnings:
                        self._warnings[key][0] += 1
                    elif len(self._warnings) < self.MAX_WARNINGS:
                        self._warnings[key] = [1, f"{_short_path(w.filename)}:{w.lineno}"]
                    else:
                        self._more_warnings += 1
                caught.clear()  # nothing of a run is kept past it but the counts

    def messages(
        self, function: str, runs: int, *, coined: int = 0, holding: int = 0
    ) -> TrainerMessages:
        """The counts so far, as a trainer returns them (:attr:`TrainerOutput.messages`).

        Args:
            function: the user's function's name.
            runs: the runs captured (one per model).
            coined: white-box models whose canary was put in by an independent coin.
            holding: white-box models holding the canary.
        """
        return TrainerMessages(
            function=function,
            runs=runs,
            printed=self.lines,
            first=self.first,
            distinct=tuple(sorted(self._distinct)),
            warnings=tuple(
                (category, message, where, count)
                for (category, message), (count, where) in self._warnings.items()
            ),
            more_warnings=self._more_warnings,
            coined=coined,
            holding=holding,
        )

    def warning_summaries(self, runs: int) -> list[str]:
        """One line per distinct warning the runs raised: how often, where, its text."""
        return self.messages("", runs).lines()[1 if self.first is not None else 0 :]

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Capture one run's stdout and stderr (Python-level writes, in order)."""
        buffer = io.StringIO()
        try:
            with redirect_stdout(buffer), redirect_stderr(buffer):
                yield
        except BaseException:
            sys.stderr.write(buffer.getvalue())
            raise
        finally:
            self._add(buffer.getvalue())

    def _add(self, text: str) -> None:
        # splitlines() also splits on the carriage returns a progress bar redraws with.
        for line in (line.strip() for line in text.splitlines()):
            if not line:
                continue
            self.lines += 1
            if self.first is None:
                self.first = line
            if len(self._distinct) < self.MAX_DISTINCT:
                self._distinct.add(_line_hash(line))

    def summary(self, who: str, runs: int) -> str | None:
        """One line on what ``runs`` runs of ``who`` printed, or ``None`` if nothing."""
        if self.first is None:
            return None
        distinct = len(self._distinct)
        more = "+" if distinct >= self.MAX_DISTINCT else ""
        plural = "" if self.lines == 1 else "s"
        first = one_line(self.first, limit=self.QUOTED)
        return (
            f"{who} printed {self.lines} line{plural} ({distinct}{more} distinct) over "
            f"{runs} model{'' if runs == 1 else 's'}, captured rather than shown; the "
            f'first: "{first}"'
        )


def _line_hash(line: str) -> int:
    """A printed line's 64-bit BLAKE2b hash: the same in every process (``hash()`` is
    salted per process), so the distinct lines of work units run apart can be joined."""
    return int.from_bytes(hashlib.blake2b(line.encode(), digest_size=8).digest(), "little")


def _short_path(filename: str) -> str:
    """A warning's file as its package and module (``opacus/privacy_engine.py``)."""
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def coerce_output(out: Any, *, num_models: int, name: str) -> TrainerOutput:
    """Check a trainer's output (a :class:`TrainerOutput` or a dict) and normalise it."""
    if isinstance(out, dict):
        keys = {"scores", "models", "records", "claim", "observations", "messages"}
        unknown = set(out) - keys
        if unknown:
            raise DpauditError(f"Trainer {name!r} returned unknown keys {sorted(unknown)}.")
        claim = out.get("claim")
        if isinstance(claim, dict):
            claim = Claim(**claim)
        records = out.get("records")
        scores = out.get("scores")
        out = TrainerOutput(
            scores=None if scores is None else np.asarray(scores, dtype=float),
            models=out.get("models"),
            records=None if records is None else tuple(records),
            claim=claim,
            observations=out.get("observations"),
            messages=out.get("messages"),
        )
    if not isinstance(out, TrainerOutput):
        raise DpauditError(
            f"Trainer {name!r} must return a TrainerOutput or a dict. Got {type(out).__name__}."
        )
    if out.scores is not None:
        s = np.asarray(out.scores, dtype=float).reshape(-1)
        if s.size != num_models or not np.all(np.isfinite(s)):
            raise DpauditError(
                f"Trainer {name!r} must return {num_models} finite scores. Got {s.size} "
                f"values{'' if np.all(np.isfinite(s)) else ' with NaN or infinity'}."
            )
    if out.records is not None and len(out.records) != num_models:
        raise DpauditError(
            f"Trainer {name!r} must return one record per model ({num_models}). "
            f"Got {len(out.records)}."
        )
    obs = out.observations
    if obs is not None:
        if not isinstance(obs, GreyBoxObservations):
            raise DpauditError(
                f"Trainer {name!r} must return 'observations' as a GreyBoxObservations. "
                f"Got {type(obs).__name__}."
            )
        if obs.num_models != num_models:
            raise DpauditError(
                f"Trainer {name!r} must return observations of every model ({num_models}). "
                f"Got {obs.num_models}."
            )
    if out.messages is not None and not isinstance(out.messages, TrainerMessages):
        raise DpauditError(
            f"Trainer {name!r} must return 'messages' as a TrainerMessages. "
            f"Got {type(out.messages).__name__}."
        )
    return out
