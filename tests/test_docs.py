"""The documentation in docs/ stays true to the code it describes.

- The CLI reference in docs/cli.md is what `kotonia --help` and each subcommand's `--help`
  print (regenerate it with `python -m tests.cli_reference`).
- Every relative link in the README and docs/ leads to a file of the repository; nothing points
  at a design document outside it.
"""

from __future__ import annotations

import re
from pathlib import Path

from kotonia_tui.cli import build_parser
from tests.cli_reference import (
    DOC,
    generated_part,
    help_text,
    python_version,
    reference,
    subcommands,
)

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_cli_reference_is_what_the_help_prints():
    written = generated_part(DOC.read_text(encoding="utf-8"))
    regenerate = "docs/cli.md is out of date: run `.venv/bin/python -m tests.cli_reference`"
    # Every command, option and help sentence is there, word for word...
    for name in ["", *subcommands(build_parser())]:
        assert f"### `{f'kotonia {name}'.strip()}`" in written, regenerate
        for line in help_text([name] if name else []).splitlines():
            for word in re.findall(r"--?[\w-]+|[A-Za-z][\w'`]+", line):
                assert word in written, f"{word!r} (kotonia {name} --help): {regenerate}"
    # ...and, on the Python that wrote it, exactly as printed (another Python's argparse lays
    # out option lists a little differently).
    if f"<!-- argparse of Python {python_version()} -->" in written:
        assert written == reference(), regenerate


def test_every_subcommand_is_in_the_reference():
    written = generated_part(DOC.read_text(encoding="utf-8"))
    for name in subcommands(build_parser()):
        assert f"usage: kotonia {name} " in written


def test_relative_links_in_the_docs_lead_to_files_of_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) >= 4
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "shared/DESIGN" not in text, f"{page.name} points outside the repository"
        for target in LINK.findall(text):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            assert path.exists(), f"{page.name}: the link {target} leads nowhere"
            assert ROOT in path.parents, f"{page.name}: the link {target} leaves the repository"


def test_module_docstrings_point_into_the_repository():
    for source in sorted((ROOT / "kotonia_tui").rglob("*.py")):
        text = source.read_text(encoding="utf-8")
        assert "DESIGN.md" not in text, f"{source.relative_to(ROOT)} cites DESIGN.md"
