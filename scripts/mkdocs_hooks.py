"""mkdocs hook: links from a docs page to a repository file outside docs/.

The pages link to source files (``[dpaudit/kinds/base.py](../dpaudit/kinds/base.py)``),
which read well on a forge but are not pages of the site. This hook turns each such link
into its link text, after checking that the file exists, so a link to a moved or deleted
file still fails the strict build, as a broken link between pages does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: A markdown link whose target climbs out of docs/: ``[text](../path)``.
_REPO_LINK = re.compile(r"\[([^\]]+)\]\((\.\./[^)#\s]+)(#[^)]*)?\)")


class RepositoryLinkError(ValueError):
    """A page links to a repository file that does not exist."""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace links to repository files by their text; refuse links to missing files."""
    page_dir = (Path(config["docs_dir"]) / page.file.src_path).parent

    def replace(match: re.Match[str]) -> str:
        target = (page_dir / match.group(2)).resolve()
        if not target.exists():
            raise RepositoryLinkError(
                f"{page.file.src_path} links to {match.group(2)}, which does not exist"
            )
        return match.group(1)

    return _REPO_LINK.sub(replace, markdown)
