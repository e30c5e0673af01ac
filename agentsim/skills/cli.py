"""``agentsim skills list|show|validate|new|diff``.

``add_skills_commands`` plugs the subcommand into the top-level ``agentsim`` parser;
``main`` runs it standalone (``python -m agentsim.skills.cli skills list``). Exit codes:
0 fine, 1 validation errors, 2 bad input (unknown skill, missing path, bad name).

``list`` and ``show`` take ``--experiment FILE`` when the parser is given a way to read an
experiment's skills (``agentsim``'s own parser passes ``agentsim.run.world``'s, which builds
them as a run does: this layer may not import the run); they then show what that
experiment's agents would see, MCP servers' skills included, with each skill's origin and
trust. A server that cannot be used is a ``ConfigError`` (exit 2 from ``agentsim``), as at
the start of a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import stat
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentsim.errors import SkillNotFoundError, visible
from agentsim.skills.manifest import Diagnostic, load_skill_md, name_problem
from agentsim.skills.preview import ExperimentSkills
from agentsim.skills.provenance import add_diff_parser
from agentsim.skills.registry import SkillDescriptor, SkillRegistry
from agentsim.skills.scan import builtin_skills_dir, check_scripts, list_skill_files

__all__ = ["ExperimentReader", "add_skills_commands", "default_roots", "main"]

ExperimentReader = Callable[[str], ExperimentSkills]
"""Reads an experiment file's skills as its run would (``--experiment FILE``)."""


class _BadInput(Exception):
    """Input the user must fix: printed to stderr, exit code 2."""


def default_roots() -> tuple[Path | None, Path]:
    """(built-in root, custom root): agentsim's own built-in skills (wherever the command
    runs: a ``skills/`` folder of the current directory is not agentsim's) and
    ``./custom/skills``."""
    return builtin_skills_dir(), Path.cwd() / "custom" / "skills"


def _registry(args: argparse.Namespace) -> SkillRegistry:
    builtin, custom = default_roots()
    if args.builtin is not None:
        builtin = Path(args.builtin)
        if not builtin.is_dir():
            raise _BadInput(
                f"--builtin {args.builtin}: no such folder; pass the folder that holds the "
                "built-in skills"
            )
    if args.custom is not None:
        custom = Path(args.custom)
        if not custom.is_dir():
            raise _BadInput(
                f"--custom {args.custom}: no such folder; pass the folder that holds your skills"
            )
    registry = SkillRegistry()
    if builtin is not None:
        registry.scan_builtin(builtin)
    if custom.is_dir():
        registry.scan_custom(custom)
    return registry


def _summary(
    skills: tuple[SkillDescriptor, ...], diagnostics: tuple[Diagnostic, ...]
) -> dict[str, Any]:
    by_namespace: dict[str, dict[str, int]] = {}
    for desc in skills:
        counts = by_namespace.setdefault(desc.namespace, {"active": 0, "deprecated": 0})
        counts[desc.manifest.status] += 1
    severities = Counter(d.severity for d in diagnostics)
    return {
        "total": len(skills),
        "by_namespace": by_namespace,
        "errors": severities["error"],
        "warnings": severities["warning"],
    }


@contextmanager
def _skills(
    args: argparse.Namespace,
) -> Iterator[tuple[SkillRegistry, ExperimentSkills | None]]:
    """The registry the command looks at: the folders' (``--builtin`` / ``--custom``), or
    the experiment's (``--experiment``: with what it knows of the run, closed after)."""
    path: str | None = getattr(args, "experiment", None)
    if path is None:
        yield _registry(args), None
        return
    if args.builtin is not None or args.custom is not None:
        raise _BadInput(
            "--experiment takes its skill folders from the experiment file; drop --builtin "
            "and --custom"
        )
    reader: ExperimentReader = args.read_experiment
    with reader(path) as found:
        yield found.registry, found


def _print(text: str = "") -> None:
    print(visible(text))


def _count(n: int) -> str:
    return f"{n} skill{'' if n == 1 else 's'}"


def _groups(names: list[str]) -> str:
    return f"group{'s' if len(names) > 1 else ''} {', '.join(names)}"


def _offer_flags(offer: dict[str, Any]) -> str:
    flags = ""
    if offer["unavailable"] is not None:
        flags += f" [not offered: {offer['unavailable']}]"
    if offer["disabled_for"]:
        flags += f" [disabled for {_groups(offer['disabled_for'])}]"
    if offer["default_for"]:
        flags += f" [default for {_groups(offer['default_for'])}]"
    return flags


def _origin_text(exp: ExperimentSkills, desc: SkillDescriptor) -> str:
    server = exp.server_of(desc)
    if server is None:
        return f"folder {desc.path}"
    return f"MCP server {server.field} ({server.target})"


def _trust_text(exp: ExperimentSkills, desc: SkillDescriptor) -> str:
    trust = exp.trust(desc)
    if trust["trusted"]:
        text = "trusted: its !`cmd` lines run"
    elif exp.server_of(desc) is not None:
        text = "untrusted (from an MCP server): its !`cmd` lines never run"
    else:
        text = "namespace not trusted: its !`cmd` lines do not run"
    if trust["scripts"] == "none":
        return f"{text}; no scripts"
    if trust["scripts"] == "refused":
        server = exp.server_of(desc)
        field = server.field if server is not None else "skills.mcp"
        return f"{text}; scripts not allowed (scripts: true on {field} allows them)"
    return f"{text}; scripts run under {trust['isolation']} isolation"


def _experiment_summary(
    exp: ExperimentSkills, everything: tuple[SkillDescriptor, ...]
) -> dict[str, Any]:
    """The groups' catalogs and the MCP servers, for ``list --experiment``."""
    budget = exp.space.catalog_budget_tokens
    groups = [
        {
            "group": group,
            "offered": offered,
            "catalog_tokens": catalog.tokens,
            "budget_tokens": budget,
            "fits": catalog.head == offered,
            "shared_head": catalog.head,
        }
        for group, (offered, catalog) in exp.catalogs().items()
    ]
    per_namespace = Counter(d.namespace for d in everything)
    servers = [
        {
            "server": server.field,
            "namespace": server.namespace,
            "url": server.url,
            "command": list(server.command) or None,
            "scripts": server.scripts,
            "skills": per_namespace[server.namespace],
        }
        for server in exp.servers
    ]
    return {"experiment": exp.experiment, "groups": groups, "servers": servers}


def _print_experiment_summary(summary: dict[str, Any]) -> None:
    for g in summary["groups"]:
        offered, tokens, budget = g["offered"], g["catalog_tokens"], g["budget_tokens"]
        if g["fits"]:
            _print(
                f"group {g['group']}: {_count(offered)} offered; its catalog lists them all in "
                f"{tokens:,} of {budget:,} tokens"
            )
        else:
            _print(
                f"group {g['group']}: {_count(offered)} offered, over the catalog budget of "
                f"{budget:,} tokens: {g['shared_head']} listed for every agent, the other "
                f"{offered - g['shared_head']} picked per agent or found with search_skills"
            )
    for s in summary["servers"]:
        target = s["url"] if s["url"] is not None else shlex.join(s["command"])
        scripts = "scripts allowed (process isolation)" if s["scripts"] else "scripts not allowed"
        _print(
            f"MCP server {s['server']} ({target}): {_count(s['skills'])} as {s['namespace']}@..., "
            f"untrusted, {scripts}"
        )


def _cmd_list(args: argparse.Namespace) -> int:
    with _skills(args) as (registry, exp):
        return _list(args, registry, exp)


def _list(args: argparse.Namespace, registry: SkillRegistry, exp: ExperimentSkills | None) -> int:
    everything = registry.list_all()
    shown = tuple(
        d
        for d in everything
        if (args.namespace is None or d.namespace == args.namespace)
        and (args.tag is None or args.tag in d.manifest.tags)
        and (args.status is None or d.manifest.status == args.status)
    )
    summary = _summary(everything, registry.diagnostics)
    shadowed = registry.snapshot().shadowed()
    offers = exp.offers() if exp is not None else {}
    about = _experiment_summary(exp, everything) if exp is not None else {}
    if args.json:
        skills = [d.to_dict() for d in shown]
        if exp is not None:
            for d, row in zip(shown, skills, strict=True):
                row.update(origin=exp.origin(d), trust=exp.trust(d), offers=offers[d.skill_id])
        out = {
            **about,
            "skills": skills,
            "summary": summary,
            # skill id -> the id that wins its bare name
            "shadowed": shadowed,
            "diagnostics": [d.to_dict() for d in registry.diagnostics],
        }
        print(json.dumps(out, indent=2))
        return 0
    width = max((len(d.skill_id) for d in shown), default=8)
    for desc in shown:
        flag = " [deprecated]" if desc.manifest.status == "deprecated" else ""
        if desc.skill_id in shadowed:
            flag += f" [shadowed by {shadowed[desc.skill_id]}]"
        if exp is not None:
            flag += _offer_flags(offers[desc.skill_id])
        text = (
            desc.manifest.description
            if len(desc.manifest.description) <= 80
            else desc.manifest.description[:77] + "..."
        )
        _print(f"{desc.skill_id:<{width}}  {text}{flag}")
        if exp is not None:
            _print(f"    {_origin_text(exp, desc)}; {_trust_text(exp, desc)}")
    if not shown:
        _print("no skills match" if everything else "no skills found")
    parts = [
        f"{ns} {c['active'] + c['deprecated']} ({c['active']} active, {c['deprecated']} deprecated)"
        for ns, c in summary["by_namespace"].items()
    ]
    _print(
        f"\n{summary['total']} skills: {'; '.join(parts) or 'none'}; "
        f"{summary['errors']} errors, {summary['warnings']} warnings"
    )
    if about:
        _print_experiment_summary(about)
    for diag in registry.diagnostics:
        _print(f"  {diag}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    with _skills(args) as (registry, exp):
        return _show(args, registry, exp)


def _show(args: argparse.Namespace, registry: SkillRegistry, exp: ExperimentSkills | None) -> int:
    try:
        desc = registry.resolve(args.id)
    except SkillNotFoundError as exc:
        if exp is not None:  # point at the experiment's list, not the folders'
            hint = (
                f"run `agentsim skills list --experiment {shlex.quote(args.experiment)}` to "
                "see its skills"
            )
            exc = SkillNotFoundError(exc.name, exc.close, hint)
        raise _BadInput(str(exc)) from None
    body = registry.read_skill_doc(desc.skill_id)
    files = list_skill_files(desc.path)
    offer = exp.offers()[desc.skill_id] if exp is not None else {}
    if args.json:
        out: dict[str, Any] = {"skill": desc.to_dict(), "body": body, "files": files}
        if exp is not None:
            out.update(origin=exp.origin(desc), trust=exp.trust(desc), offers=offer)
        print(json.dumps(out, indent=2))
        return 0
    _print(f"{desc.skill_id}  ({desc.manifest.status}, isolation {desc.manifest.isolation})")
    _print(f"path:        {desc.path}")
    if exp is not None:
        _print(f"origin:      {_origin_text(exp, desc)}")
        _print(f"trust:       {_trust_text(exp, desc)}")
        offered = _groups(offer["offered_to"]) if offer["offered_to"] else "no group"
        _print(f"offered to:  {offered}{_offer_flags(offer)}")
    _print(f"description: {desc.manifest.description}")
    if desc.manifest.script:
        _print(f"script:      {desc.manifest.script}")
    for hook_type, rel in desc.hooks:
        _print(f"hook:        {hook_type} -> {rel}")
    if desc.manifest.tags:
        _print(f"tags:        {', '.join(desc.manifest.tags)}")
    if desc.manifest.requires:  # skills, env:<module> and tool:<tool> entries
        _print(f"requires:    {', '.join(desc.manifest.requires)}")
    others = [d.skill_id for d in registry.find_by_name(desc.manifest.name) if d is not desc]
    if others:
        _print(f"also named {desc.manifest.name!r}: {', '.join(others)}")
    _print(f"files:       {', '.join(files)}")
    _print("\n" + body.rstrip("\n"))
    return 0


def _candidates(folder: Path) -> list[Path]:
    """The SKILL.md of every skill sub-folder, as the registry would find them; a link
    that cannot be followed (a loop) is kept, so that validating it says what is wrong."""
    found = []
    for sub in sorted(folder.iterdir()):
        if sub.name.startswith((".", "_")):
            continue
        try:
            mode = sub.stat().st_mode  # follows a link; a loop raises
        except OSError:
            if sub.is_symlink():
                found.append(sub / "SKILL.md")
            continue
        if stat.S_ISDIR(mode) and os.path.lexists(sub / "SKILL.md"):
            found.append(sub / "SKILL.md")
    return found


def _skill_files(path: Path) -> list[Path]:
    if not os.path.lexists(path):
        raise _BadInput(
            f"{path}: no such file or folder; pass a skill folder, a SKILL.md, or a folder "
            "of skills"
        )
    if not path.is_dir():
        return [path]  # a file, or something odd: loading it says what is wrong
    if os.path.lexists(path / "SKILL.md"):
        return [path / "SKILL.md"]
    found = _candidates(path)
    if not found:
        raise _BadInput(
            f"{path}: no SKILL.md in it or in its sub-folders; pass a skill folder, a "
            "SKILL.md, or a folder of skills"
        )
    return found


def _default_paths() -> list[Path]:
    """What ``validate`` checks without a path: the built-in skills and ./custom/skills."""
    builtin, custom = default_roots()
    found = [p for p in (builtin, custom) if p is not None and p.is_dir() and _candidates(p)]
    if not found:
        raise _BadInput(
            "no skills to check here (no built-in skills, no ./custom/skills); pass a skill "
            "folder, a SKILL.md, or a folder of skills"
        )
    return found


def _cmd_validate(args: argparse.Namespace) -> int:
    paths = [Path(raw) for raw in args.paths] or _default_paths()
    files = [md for path in paths for md in _skill_files(path)]
    results = []
    counts: Counter[str] = Counter()
    for md in files:
        parsed = load_skill_md(md, strict=args.strict, portable=args.portable)
        diags = parsed.diagnostics
        if parsed.manifest is not None:  # its scripts compile and their imports exist
            desc = SkillDescriptor.create("custom", str(Path(md).parent), parsed.manifest)
            diags = (*diags, *check_scripts(desc))
        counts.update(d.severity for d in diags)
        n_err = sum(d.severity == "error" for d in diags)
        results.append(
            {
                "path": str(md),
                "name": parsed.manifest.name if parsed.manifest else None,
                "ok": n_err == 0,
                "diagnostics": [d.to_dict() for d in diags],
            }
        )
        if not args.json:
            print(f"{'ok  ' if n_err == 0 else 'FAIL'} {md}")
            for diag in diags:
                print(f"  {diag}")
    errors, warnings, notes = counts["error"], counts["warning"], counts["note"]
    if args.json:
        out = {
            "ok": errors == 0,
            "checked": len(files),
            "errors": errors,
            "warnings": warnings,
            "notes": notes,
            "results": results,
        }
        print(json.dumps(out, indent=2))
    else:
        noted = f", {notes} notes (agentsim extensions)" if notes else ""
        failed = sum(not r["ok"] for r in results)
        verdict = ""
        if args.portable:
            verdict = f"; {len(files) - failed} portable, {failed} not"
        print(f"{len(files)} skills checked: {errors} errors, {warnings} warnings{noted}{verdict}")
    return 1 if errors else 0


# The portable form: agentsim's own keys under metadata, so other clients accept the skill.
_SKILL_TEMPLATE = """\
---
name: {name}
description: Use when ... (say in one or two sentences when an agent should pick this skill).
metadata:
  agentsim.script: scripts/{module}.py
---
# {title}

Explain here, for the model, what the skill does and how to call its script.
Arguments given on activation are available as $ARGUMENTS ($1, $2, ...).
"""

_SCRIPT_TEMPLATE = '''\
"""Script of the {name} skill."""


def entrypoint(argv: list[str], ctx: object) -> str:
    """Called in-process with the arguments and the agent's SkillScriptContext."""
    return "{name}: " + " ".join(argv)
'''

_TEST_TEMPLATE = '''\
"""Run with: python -m pytest {rel}"""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "{module}.py"


def _load():
    spec = importlib.util.spec_from_file_location("{module}", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_entrypoint_echoes_its_arguments():
    assert _load().entrypoint(["a", "b"], None) == "{name}: a b"
'''


def _cmd_new(args: argparse.Namespace) -> int:
    name: str = args.name
    if name_problem(name):
        raise _BadInput(
            f"skill name {name!r} is invalid; use at most 64 lowercase letters, digits and "
            "single hyphens, like 'daily-guidance'"
        )
    parent = Path(args.dir) if args.dir is not None else default_roots()[1]
    folder = parent / name
    if folder.exists():
        raise _BadInput(f"{folder} already exists; choose another name or remove the folder first")
    module = name.replace("-", "_")
    title = name.replace("-", " ").capitalize()
    (folder / "scripts").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "SKILL.md").write_text(
        _SKILL_TEMPLATE.format(name=name, module=module, title=title), encoding="utf-8"
    )
    (folder / "scripts" / f"{module}.py").write_text(
        _SCRIPT_TEMPLATE.format(name=name), encoding="utf-8"
    )
    test_rel = f"tests/test_{module}.py"
    (folder / test_rel).write_text(
        _TEST_TEMPLATE.format(name=name, module=module, rel=test_rel), encoding="utf-8"
    )
    parsed = load_skill_md(folder, portable=True)
    for diag in parsed.diagnostics:
        print(f"  {diag}")
    print(f"created {folder}; edit its description, then run: agentsim skills validate {folder}")
    return 0 if parsed.ok else 1


def _roots_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--builtin", metavar="DIR", help="built-in skills folder")
    common.add_argument("--custom", metavar="DIR", help="custom skills folder")
    return common


def _experiment_option(parser: argparse.ArgumentParser, reader: ExperimentReader | None) -> None:
    if reader is None:
        return
    parser.add_argument(
        "--experiment",
        metavar="FILE",
        help="the skills that experiment's agents would see: its folders, disabled lists and "
        "MCP servers (fetched now, into its cache), with each skill's origin and trust",
    )
    parser.set_defaults(read_experiment=reader)


def add_skills_commands(
    subparsers: argparse._SubParsersAction[Any], *, experiment: ExperimentReader | None = None
) -> None:
    """Register ``skills list|show|validate|new`` on the top-level parser's subparsers;
    with ``experiment`` (how to read an experiment file's skills), ``list`` and ``show``
    take ``--experiment FILE``."""
    common = _roots_options()
    skills = subparsers.add_parser("skills", help="list, show, validate or create skills")
    sub = skills.add_subparsers(dest="skills_command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "list",
        parents=[common],
        help="registered skills and their health (an experiment's, with --experiment)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--namespace", metavar="N", help="only this namespace (built-in, custom, ...)")
    p.add_argument("--tag", metavar="T", help="only skills with this tag")
    p.add_argument(
        "--status",
        metavar="S",
        choices=("active", "deprecated"),
        help="only active or deprecated skills",
    )
    _experiment_option(p, experiment)
    p.set_defaults(func=_run(_cmd_list))

    p = sub.add_parser("show", parents=[common], help="one skill: fields, files and body")
    p.add_argument("id", help="skill id (namespace@name) or bare name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _experiment_option(p, experiment)
    p.set_defaults(func=_run(_cmd_show))

    p = sub.add_parser("validate", help="check skill folders or SKILL.md files")
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="a skill folder, a SKILL.md file or a folder of skills (default: the built-in "
        "skills and ./custom/skills)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="also check portability to other Agent Skills clients (agentsim's own keys are "
        "noted, not errors)",
    )
    p.add_argument(
        "--portable",
        action="store_true",
        help="fail a skill that other Agent Skills clients would refuse: agentsim's own keys "
        "belong under metadata as agentsim.<key> string values",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run(_cmd_validate))

    add_diff_parser(sub)  # agentsim skills diff RUN_A RUN_B (agentsim.skills.provenance)

    p = sub.add_parser("new", help="scaffold a skill with a script and a test")
    p.add_argument("name", help="the new skill's name (lower-case words joined by '-')")
    p.add_argument("--dir", metavar="DIR", help="parent folder (default ./custom/skills)")
    p.set_defaults(func=_run(_cmd_new))


def _run(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = command(args)
        except _BadInput as exc:
            print(visible(f"agentsim skills: {exc}"), file=sys.stderr)
            return 2
        return code

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentsim")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_skills_commands(subparsers)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
