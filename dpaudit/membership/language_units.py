"""The work unit of a brought causal language model (``[target] format = "huggingface"``).

One unit scores every member and non-member text under the model once
(:func:`dpaudit.language.scoring.token_statistics`) and derives every listed attack's
scores from those statistics (:func:`dpaudit.language.attacks.attack_scores`). The audited
records are the ``members`` texts, then the ``non_members`` texts, in file order
(results.json's per-record rows count in that order). Membership is what the two files
say; it was not decided by fair coins unless ``[target] membership_by_coin`` states so,
so the one-run ε bound is heuristic by default, as for any brought target.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.errors import ConfigError
from dpaudit.kinds.base import RunContext
from dpaudit.language.attacks import attack_scores
from dpaudit.language.loading import load_causal_lm, weight_files
from dpaudit.language.scoring import token_ids, token_statistics
from dpaudit.language.texts import read_texts
from dpaudit.membership.schema import MembershipSection, language_attacks
from dpaudit.sections import Table

__all__ = ["LanguageSpec", "language_spec", "language_unit", "preflight_language"]

#: Texts per forward pass (left-padded, so the scores do not depend on it).
BATCH_SIZE = 8


class LanguageSpec(Table):
    """What the unit reads (picklable; its JSON, less the folders, names the unit).

    Attributes:
        path, members, non_members, reference_paths: resolved paths of ``[target]``.
        attacks: the attacks, in the file's order.
        min_k_fraction: Min-K%'s k.
        allow_pickle: load pickle weights (``[target] allow_pickle``).
        digest: hash of every file read, so a changed model or text never reuses a unit.
        device: ``[execution] device``, where the models run (not in the unit key).
    """

    path: str
    members: str
    non_members: str
    reference_paths: tuple[str, ...] = ()
    attacks: tuple[str, ...]
    min_k_fraction: float
    allow_pickle: bool = False
    digest: str = ""
    device: str = "cpu"

    def key_data(self) -> dict[str, Any]:
        """The unit key: attacks, k and the files' digest, never where the files are or
        the device they are scored on."""
        return self.model_dump(
            mode="json", exclude={"path", "members", "non_members", "reference_paths", "device"}
        )

    @property
    def unit(self) -> str:
        return f"lm-{self.digest}"


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        files = weight_files(p) if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def language_spec(section: MembershipSection, context: RunContext) -> LanguageSpec:
    """The spec of a language model's unit (the files' digest included)."""
    t = context.shared.target
    if t.path is None or t.members is None or t.non_members is None:  # refused on load
        raise ConfigError("[target] a language model needs path, members and non_members")
    attacks = tuple(language_attacks(section))
    if "reference" in attacks and not t.reference_paths:
        raise ConfigError(
            "[membership] the 'reference' attack needs [target] reference_paths: folders of "
            "reference language models (trained on other text of the same kind)"
        )
    if t.reference_paths and "reference" not in attacks:
        raise ConfigError(
            "[target] reference_paths is read only by the 'reference' attack; list it in "
            "[membership] attacks"
        )
    paths = [context.resolve(p) for p in (t.path, t.members, t.non_members, *t.reference_paths)]
    return LanguageSpec(
        path=str(paths[0]),
        members=str(paths[1]),
        non_members=str(paths[2]),
        reference_paths=tuple(str(p) for p in paths[3:]),
        attacks=attacks,
        min_k_fraction=section.min_k_fraction,
        allow_pickle=t.allow_pickle,
        digest=_digest(paths),
        device=context.device,
    )


def preflight_language(spec: LanguageSpec) -> None:
    """Read both text files and load every model before any unit runs, and tokenize the
    texts with the target's tokenizer (too short or too long a text is refused here).

    Raises:
        DpauditError: one line naming the file and what to do.
    """
    members, non_members = read_texts(Path(spec.members)), read_texts(Path(spec.non_members))
    for folder in (spec.path, *spec.reference_paths):
        lm = load_causal_lm(Path(folder), allow_pickle=spec.allow_pickle)
        token_ids(lm, members + non_members)


def language_unit(spec: LanguageSpec, unit: str) -> dict[str, np.ndarray]:
    """Score every text with every attack: ``scores`` is (attacks, texts), ``membership``
    marks the member texts (the first ones)."""
    members, non_members = read_texts(Path(spec.members)), read_texts(Path(spec.non_members))
    texts = members + non_members
    lm = load_causal_lm(Path(spec.path), allow_pickle=spec.allow_pickle, device=spec.device)
    stats = token_statistics(lm, texts, batch_size=BATCH_SIZE)
    reference = [
        token_statistics(
            load_causal_lm(Path(p), allow_pickle=spec.allow_pickle, device=spec.device),
            texts,
            batch_size=BATCH_SIZE,
        )
        for p in spec.reference_paths
    ]
    scores = np.stack(
        [
            attack_scores(a, stats, texts, k_fraction=spec.min_k_fraction, reference=reference)
            for a in spec.attacks
        ]
    )
    options: dict[str, dict[str, Any]] = {a: {} for a in spec.attacks}
    for a in ("min-k", "min-k++"):
        if a in options:
            options[a] = {"k_fraction": spec.min_k_fraction}
    if "reference" in options:
        options["reference"] = {"reference_models": len(spec.reference_paths)}
    info = {
        "attacks": list(spec.attacks),
        "options": options,
        "target": lm.description
        | {"tokens": int(sum(s.tokens for s in stats)), "device": spec.device},
    }
    membership = np.r_[np.ones(len(members), dtype=bool), np.zeros(len(non_members), dtype=bool)]
    return {"scores": scores, "membership": membership, "info": np.array(json.dumps(info))}
