"""A raw-HTML link (``<a href>``, ``<img src>``) to a page or file the site does not have fails
the strict docs build: mkdocs validates Markdown links only and passes raw HTML through as
written. Hooked into mkdocs.yml (``hooks:``); tests/hostile/test_docs_raw_links_hostile.py runs
it over docs/ without mkdocs.

A relative target is looked up from the page's source folder (``../guide/install.md``) and from
its URL (``../install/``: mkdocs serves ``guide/install.md`` at ``guide/install/``); it exists
when a file, a ``.md`` page or a folder's ``index.md`` is there. External links (a scheme,
``//``), anchors alone and absolute paths (refused: a site may be served under a sub-path) are
not files to look up.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

RAW_LINK = re.compile(
    r"""<(?:a|img|source|link|script|iframe)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']""",
    re.IGNORECASE,
)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.IGNORECASE)


def page_url_dir(src: str) -> str:
    """The folder of the page's URL (use_directory_urls): guide/install.md → guide/install."""
    folder, name = posixpath.split(src)
    stem = name.removesuffix(".md")
    return folder if stem in ("index", "README") else posixpath.join(folder, stem)


def exists(path: str, docs: Path) -> bool:
    if path.startswith("..") or path.startswith("/"):
        return False  # outside the site
    bare = path.rstrip("/") or "."
    candidates = (bare, f"{bare}.md", posixpath.join(bare, "index.md"))
    return any((docs / c).is_file() for c in candidates)


def broken_links(markdown: str, page_src: str, docs: Path) -> list[str]:
    """The raw-HTML link targets of one page (``page_src`` relative to ``docs``) that lead
    nowhere in the site, each with why."""
    broken = []
    for target in RAW_LINK.findall(markdown):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not path or EXTERNAL.match(target):
            continue
        if path.startswith("/"):
            broken.append(f"{target!r} (absolute: link relative to the page)")
            continue
        bases = (posixpath.dirname(page_src), page_url_dir(page_src))
        if not any(exists(posixpath.normpath(posixpath.join(b, path)), docs) for b in bases):
            broken.append(f"{target!r} (no such page or file)")
    return broken


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    """The mkdocs hook: a page with a raw-HTML link that leads nowhere fails the build."""
    from mkdocs.exceptions import PluginError

    broken = broken_links(markdown, page.file.src_uri, Path(config["docs_dir"]))
    if broken:
        raise PluginError(f"{page.file.src_uri}: raw-HTML link to nothing: {', '.join(broken)}")
    return markdown
