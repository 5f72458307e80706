"""A causal language model and its tokenizer from a local folder, offline.

The folder is what ``save_pretrained`` writes: ``config.json``, safetensors weights
(``model.safetensors`` or its shards) and the tokenizer's files. dpaudit never
downloads (``local_files_only=True``: a name that is not a local folder is refused before
``transformers`` sees it), never runs code shipped with a model (``trust_remote_code``
stays ``False``) and loads pickle weights (``pytorch_model.bin``) only when the user
trusts them (``allow_pickle``), as for other brought models.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from dpaudit.errors import ConfigError

__all__ = ["CausalLM", "load_causal_lm", "quiet_progress", "starts_with_special", "weight_files"]

_SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
_PICKLE = ("pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class CausalLM:
    """A loaded causal LM in evaluation mode, its tokenizer, and where they came from."""

    model: Any
    tokenizer: Any
    folder: str
    device: str

    @property
    def description(self) -> dict[str, Any]:
        """What results.json records of the target."""
        config = self.model.config
        return {
            "format": "huggingface",
            "architecture": type(self.model).__name__,
            "parameters": int(sum(p.numel() for p in self.model.parameters())),
            "vocabulary": int(config.vocab_size),
            "adds_start_token": starts_with_special(self.tokenizer),
        }


@contextmanager
def quiet_progress() -> Iterator[None]:
    """``transformers``' progress bars off while loading or saving (restored after): an
    audit's output is its own lines, not a bar per weight file."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def weight_files(folder: Path) -> list[Path]:
    """The files a folder's model is read from (config, weights, tokenizer), sorted: what
    a unit's key hashes so that a changed model never reuses stored scores."""
    return sorted(p for p in folder.rglob("*") if p.is_file())


def starts_with_special(tokenizer: Any) -> bool:
    """Whether the tokenizer puts a special token before a text's first token."""
    ids = tokenizer("a")["input_ids"]
    return bool(ids) and ids[0] in set(tokenizer.all_special_ids)


def load_causal_lm(
    folder: Path,
    *,
    device: str = "cpu",
    allow_pickle: bool = False,
    key: str = "[target] path",
    eager: bool = False,
) -> CausalLM:
    """Load the causal LM saved in ``folder``, offline.

    Args:
        folder: a local folder written by ``save_pretrained`` (model and tokenizer).
        device: torch device the model runs on (``"cpu"``, ``"cuda"``, ...).
        allow_pickle: load ``pytorch_model.bin`` weights when no safetensors weights exist
            (a pickle runs arbitrary code when loaded: only for files you trust).
        key: the audit-file key that named the folder, for the messages.
        eager: load with the eager attention implementation (``torch.func``'s
            per-record gradients run through it; fused kernels may not).

    Returns:
        The model in evaluation mode on ``device`` and its tokenizer.

    Raises:
        ConfigError: ``folder`` is not a local folder, lacks ``config.json`` or safetensors
            weights (pickle weights without ``allow_pickle``), or ``transformers`` cannot
            load it offline.
    """
    if not folder.is_dir():
        raise ConfigError(
            f"{key} {str(folder)!r} is not a local folder; dpaudit never downloads "
            "models: save yours with save_pretrained() and give that folder"
        )
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{key} {str(folder)!r} has no config.json (save_pretrained)")
    safetensors = any((folder / name).is_file() for name in _SAFETENSORS)
    pickle = any((folder / name).is_file() for name in _PICKLE)
    if not safetensors and not (pickle and allow_pickle):
        trust = " or set [target] allow_pickle = true" if key.startswith("[target]") else ""
        why = (
            "holds only pickle weights (pytorch_model.bin), which run arbitrary code when "
            f"loaded: save with safe_serialization{trust}"
            if pickle
            else "has no model.safetensors weights"
        )
        raise ConfigError(f"{key} {str(folder)!r} {why}")
    try:
        with quiet_progress():
            tokenizer = AutoTokenizer.from_pretrained(
                folder, local_files_only=True, trust_remote_code=False
            )
            model = AutoModelForCausalLM.from_pretrained(
                folder,
                local_files_only=True,
                trust_remote_code=False,
                use_safetensors=safetensors,
                **({"attn_implementation": "eager"} if eager else {}),
            )
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{key} {str(folder)!r}: transformers cannot load it offline: {first}"
        ) from None
    model.eval()
    model = model.to(torch.device(device))  # type: ignore[arg-type]  # torch's stub of .to
    return CausalLM(model=model, tokenizer=tokenizer, folder=str(folder), device=device)
