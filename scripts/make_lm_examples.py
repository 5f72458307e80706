"""Build the files of the shipped language-model audits (audits/lm/), offline.

A tiny GPT-2-style model (dpaudit.language.tiny) trained from scratch on CPU on the member
texts of a seeded grammar, the member and non-member texts kept apart as JSONL. Usage:
.venv/bin/python scripts/make_lm_examples.py
"""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit.language.tiny import build_tiny_lm, generate_texts, save_lm, train_plain

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "audits" / "lm"
#: 100 member texts, 100 non-member texts, 12 epochs of Adam at 1e-2.
TEXTS, EPOCHS, LEARNING_RATE = 200, 12, 1e-2


def main() -> None:
    texts = generate_texts(TEXTS, seed=0)
    members, non_members = texts[: TEXTS // 2], texts[TEXTS // 2 :]
    lm = build_tiny_lm(seed=0)
    train_plain(lm, members, epochs=EPOCHS, seed=0, learning_rate=LEARNING_RATE)
    save_lm(lm, OUT / "model")
    for name, rows in (("members", members), ("non_members", non_members)):
        lines = "".join(json.dumps({"text": t}) + "\n" for t in rows)
        (OUT / f"{name}.jsonl").write_text(lines, encoding="utf-8")


if __name__ == "__main__":
    main()
