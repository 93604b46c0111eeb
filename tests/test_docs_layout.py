"""docs/internals.md's layout names every module of the package, so that the page a newcomer reads first matches
the tree: a module added, moved or renamed without a line there fails here, with the names to add."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pyserini_ext"
INTERNALS = ROOT / "docs" / "internals.md"


def layout_sections(text: str) -> dict[str, str]:
    """The `pyserini_ext/` entries of the layout's code block: top-level name (`models/`, `errors.py`) -> its text,
    continuation lines included."""
    block = re.search(r"^## Layout\n.*?^```\n(.*?)^```", text, re.M | re.S)
    assert block, f"{INTERNALS.name}: no code block under '## Layout'"
    lines = block.group(1).splitlines()
    start = lines.index("pyserini_ext/")
    sections: dict[str, str] = {}
    current = None
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):  # the next top-level folder (scripts/, bench/, ...): the end
            break
        entry = re.match(r"^  (\S+)", line)
        if entry:
            current = entry.group(1)
            sections[current] = line
        elif current:
            sections[current] += "\n" + line
    return sections


def missing_names(sections: dict[str, str]) -> list[str]:
    """Every module of the package the layout does not name: a top-level module by its own entry, a module in a
    folder by its file name inside that folder's entry, a subpackage by `name/` there too."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            if parts[0] != "__init__.py" and parts[0] not in sections:
                missing.append(parts[0])
            continue
        entry = sections.get(f"{parts[0]}/")
        if entry is None:
            missing.append(f"{parts[0]}/")
            continue
        inner = [f"{p}/" for p in parts[1:-1]] + ([] if parts[-1] == "__init__.py" else [parts[-1]])
        missing += ["/".join(parts) for name in inner if not re.search(rf"(?<![\w/]){re.escape(name)}", entry)]
    return sorted(set(missing))


def test_internals_layout_names_every_package_module():
    missing = missing_names(layout_sections(INTERNALS.read_text(encoding="utf-8")))
    assert not missing, f"docs/internals.md's layout does not name: {', '.join(missing)}"


def test_the_check_finds_an_unnamed_module():
    text = """## Layout

```
pyserini_ext/
  errors.py             one error type per failure class
  models/               folder.py (model folders),
                        convert.py (old folders)
scripts/                report.py
```
"""
    sections = layout_sections(text)
    assert set(sections) == {"errors.py", "models/"} and "convert.py" in sections["models/"]
    missing = missing_names(sections)
    assert "registry.py" in missing and "models/backbones.py" in missing
    assert "models/folder.py" not in missing and "errors.py" not in missing
