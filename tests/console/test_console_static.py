"""The vendored browser files are the ones the manifest names, each with its licence, and the
templates use no inline script or style (the CSP would refuse them)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import ingest_api.console

CONSOLE = Path(ingest_api.console.__file__).parent
VENDOR = CONSOLE / "static" / "vendor"


def test_vendored_files_match_their_checksums() -> None:
    manifest = (VENDOR / "SHA256SUMS").read_text().splitlines()
    listed = {}
    for line in manifest:
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    shipped = {p.name for p in VENDOR.iterdir()} - {"SHA256SUMS", "README.md"}
    assert shipped == set(listed), "every vendored file is in the manifest and nothing else"
    for library in ("htmx", "uPlot", "simple.css"):
        assert f"{library}.LICENSE" in listed


def test_templates_have_no_inline_script_or_style_or_remote_url() -> None:
    for template in (CONSOLE / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), template.name
        assert "<style" not in text and " style=" not in text, template.name
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), template.name
        assert not re.search(r"\bhx-on", text), template.name  # htmx would need eval


def test_stylesheets_load_nothing_from_urls() -> None:
    for sheet in [*VENDOR.glob("*.css"), CONSOLE / "static" / "console.css"]:
        assert "url(" not in sheet.read_text(), sheet.name
