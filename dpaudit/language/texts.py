"""Text records for language-model audits: JSONL (field ``"text"``), CSV (column
``"text"``) or any other file read as one record per non-empty line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from dpaudit.errors import DataError

__all__ = ["TEXT_FIELD", "read_texts"]

#: The JSON field or CSV column that holds a record's text.
TEXT_FIELD = "text"


def read_texts(path: Path) -> list[str]:
    """The text records of ``path``, in file order.

    Args:
        path: a ``.jsonl`` file (one JSON object per line, field ``"text"``), a ``.csv``
            file (a ``"text"`` column) or any other text file (one record per non-empty
            line, its line break removed).

    Returns:
        The records, each a non-empty string.

    Raises:
        DataError: the file is missing, unreadable as UTF-8, has a record without text,
            or holds no record.
    """
    if not path.is_file():
        raise DataError(f"The text file {str(path)!r} does not exist.")
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"The text file {str(path)!r} is not UTF-8: {exc.reason}.") from None
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        texts = _jsonl(raw, path)
    elif suffix == ".csv":
        texts = _csv(raw, path)
    else:
        texts = [line for line in raw.splitlines() if line.strip()]
    if not texts:
        raise DataError(f"The text file {str(path)!r} holds no record.")
    return texts


def _jsonl(raw: str, path: Path) -> list[str]:
    texts = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path.name} line {number} is not a JSON object: {exc.msg}.") from None
        text = record.get(TEXT_FIELD) if isinstance(record, dict) else None
        if not isinstance(text, str) or not text:
            raise DataError(
                f"{path.name} line {number} has no non-empty string field {TEXT_FIELD!r}."
            )
        texts.append(text)
    return texts


def _csv(raw: str, path: Path) -> list[str]:
    reader = csv.DictReader(raw.splitlines())
    if reader.fieldnames is None or TEXT_FIELD not in reader.fieldnames:
        raise DataError(
            f"{path.name} has no {TEXT_FIELD!r} column (columns: "
            f"{', '.join(reader.fieldnames or []) or 'none'})."
        )
    texts = []
    for number, row in enumerate(reader, start=2):
        text = row.get(TEXT_FIELD)
        if not text:
            raise DataError(f"{path.name} row {number} has an empty {TEXT_FIELD!r} column.")
        texts.append(text)
    return texts
