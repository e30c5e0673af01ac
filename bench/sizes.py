"""Lines of the package per capability (the table in docs/architecture.md). Prints JSON;
``--markdown`` prints the table instead.

    python bench/sizes.py --markdown
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agentsim"

# Capability -> the package paths (files or folders, relative to agentsim/) that make it up.
# The first match in this order wins, so the command-line modules are counted as cli.
CAPABILITIES: dict[str, tuple[str, ...]] = {
    "cli": ("cli.py", "skills/cli.py", "inspect/cli.py", "view/cli.py"),
    "registry and parsing": (
        "skills/__init__.py",
        "skills/frontmatter.py",
        "skills/manifest.py",
        "skills/scan.py",
        "skills/registry.py",
    ),
    "scripts": ("skills/scripts", "skills/context.py"),
    "runtime and catalog": ("skills",),
    "agent": ("agent",),
    "llm": ("llm",),
    "env": ("env",),
    "config": ("config",),
    "run (engine, schedules, run folder)": ("run",),
    "hosts and executors": ("hosts",),
    "store": ("store",),
    "inspect": ("inspect",),
    "view": ("view",),
    "testing doubles": ("testing",),
    "shared leaves (errors, events, seeding, tokens, paths)": ("",),
}


def capability(relative: str) -> str:
    for name, paths in CAPABILITIES.items():
        for path in paths:
            if relative == path or relative.startswith(f"{path}/" if path else ""):
                return name
    raise AssertionError(relative)  # the last capability takes everything


def sizes() -> dict[str, dict[str, int]]:
    out = {name: {"files": 0, "lines": 0} for name in CAPABILITIES}
    for path in sorted(PACKAGE.rglob("*.py")):
        row = out[capability(path.relative_to(PACKAGE).as_posix())]
        row["files"] += 1
        row["lines"] += len(path.read_text(encoding="utf-8").splitlines())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    found = sizes()
    if not parser.parse_args().markdown:
        print(json.dumps(found, indent=2))
        return
    print("| capability | files | lines |\n|---|---:|---:|")
    for name, row in found.items():
        print(f"| {name} | {row['files']} | {row['lines']:,} |")
    total = sum(r["lines"] for r in found.values())
    print(f"| **all** | {sum(r['files'] for r in found.values())} | {total:,} |")


if __name__ == "__main__":
    main()
