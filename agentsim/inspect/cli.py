"""The ``inspect``, ``interview`` and ``report`` subcommands of ``agentsim``.

    agentsim inspect RUN [--agent ID [--last N] [--tick T]] [--json]
    agentsim interview RUN --agent ID "question" [--json]
    agentsim report RUN [--out DIR] [--json]

Each command returns its exit code: 0 ok, 2 bad input (the message, on stderr, names the
thing, the problem and the fix), 1 another failure (e.g. the model of an interview).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from agentsim.errors import AgentsimError, ConfigError
from agentsim.inspect.agentview import HISTORY_LAST, AgentRecord

__all__ = ["add_inspect_commands"]

_RESULT_CHARS = 300


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except AgentsimError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, ConfigError) else exc.exit_code

    run.__doc__ = fn.__doc__
    return run


def _dump(data: Any, out: TextIO) -> None:
    out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


# -- inspect ------------------------------------------------------------------------------


def _overview_text(d: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"run {d['run_id']} ({d['name']})  {d['path']}\n")
    for line in d["behaviour"]:  # what the agents did: read it before the results
        w(f"  {line}\n")
    state = d["state"]
    if state == "dead":
        state = f"dead (manifest says running, but process {d['pid']} is gone)"
    w(f"  state        {state}  started {d['started'] or '-'}  ended {d['ended'] or '-'}\n")
    if d["reason"]:
        w(f"  reason       {d['reason']}\n")
    for problem in d["problems"]:
        w(f"  over limit   {problem}\n")
    if d.get("estimate_error"):
        from agentsim.run.estimate import error_line

        w(f"  estimate     {error_line(d['estimate_error']).partition(': ')[2]}\n")
    if d.get("lost"):
        from agentsim.run.budget import lost_line

        w(f"  thrown away  by resumes: {lost_line({'lost': d['lost']})}\n")
    for p in d["lineage"]:
        gone = " (folder missing)" if p.get("missing") else ""
        w(f"  forked from  {p['run']} at tick {p['tick']}{gone}\n")
    total = d["ticks_total"] if d["ticks_total"] is not None else "?"
    w(f"  ticks        {d['ticks_done']}/{total}  last {d['last_time'] or '-'}\n")
    rate = d["agent_steps_per_s"]
    w(f"  agents       {d['agents']:,}\n")
    w(f"  agent-steps  {d['agent_steps']:,}  ({'-' if rate is None else f'{rate:,}'} /s)  ")
    w(f"skipped {d['skipped']:,}\n")
    cost = "-" if d["cost"] is None else f"{d['cost']:.4f}"
    w(
        f"  model        {d['model_calls']:,} calls  {d['tokens']:,} tokens "
        f"({d['prompt_tokens']:,} prompt, {d['cached_prompt_tokens']:,} of them cached, "
        f"+ {d['completion_tokens']:,} completion)  cost {cost}\n"
    )
    for name, m in d["models"].items():
        mcost = "-" if m["cost"] is None else f"{m['cost']:.4f}"
        w(
            f"    {name:<10} {m['calls']:,} calls  {m['prompt_tokens'] + m['completion_tokens']:,}"
            f" tokens  errors {m['errors']:,}  cost {mcost}\n"
        )
    errors = ", ".join(f"{k} {n:,}" for k, n in d["errors"].items())
    w(f"  errors       {d['error_total']:,}: {errors}\n" if errors else "  errors       none\n")
    ended = ", ".join(f"{k} {n:,}" for k, n in d["outcomes"].items() if n)
    if ended:
        w(f"  steps        {ended}; acted {d['acted']:,}\n")
    calls = d["tool_calls"]
    if calls:
        total = sum(calls.values())
        results = ", ".join(f"{k} {calls.get(k, 0):,}" for k in ("ok", "refused", "failed"))
        w(f"  tool calls   {total:,}: {results}\n")
        for name, by in (*d["tool_calls_by_tool"].items(), *d["tool_calls_by_skill"].items()):
            bad = by.get("refused", 0) + by.get("failed", 0)
            if bad:
                w(
                    f"    {name:<38} refused {by.get('refused', 0):,}  failed "
                    f"{by.get('failed', 0):,} of {sum(by.values()):,}\n"
                )
    if d["gate_retries"]:
        w(f"  gate retries {d['gate_retries']:,} (each re-sent a step's full prompt)\n")
    for q in d["quarantined"]:
        w(
            f"  quarantined  {q['skill']} script {q['script']} at tick {q['tick']} "
            "(repeated timeouts)\n"
        )
    w(f"  checkpoints  {', '.join(map(str, d['checkpoints'])) or 'none'}\n")
    if d["skills"]:
        w("  skills                                   activations  script calls  failed\n")
        for sid, u in d["skills"].items():
            w(
                f"    {sid:<38} {u['activations']:>11,} {u['script_calls']:>13,} "
                f"{u['script_failures']:>7,}\n"
            )
    for sid, visible in d.get("never_fires", {}).items():
        w(
            f"  never fires  {sid}: listed in {visible:,} catalogs, never activated or called "
            "(trigger rates: agentsim report)\n"
        )
    for sid, u in d["skills"].items():
        if u.get("script_truncated"):
            w(
                f"  truncated    {sid}: {u['script_truncated']:,} script outputs cut at the "
                "runner's cap (the agent saw the start and a marker)\n"
            )
    if d["skills_hidden"]:  # skills whose requirements this run does not meet
        n = len(d["skills_hidden"])
        why = ", ".join(f"{sid} ({reason})" for sid, reason in d["skills_hidden"].items())
        w(f"  hidden       {n} skill{'s' if n != 1 else ''} not offered: {why}\n")
    for key, why in d["skills_refused"].items():
        w(f"  refused      {key}: {why}\n")
    for loser, winner in d["skills_shadowed"].items():
        w(f"  collision    {winner} wins the name over {loser}\n")
    if str(d.get("sandbox") or "").startswith("none"):
        w(
            "  WARNING      isolation: process ran without a sandbox on this machine "
            f"({d['sandbox'].removeprefix('none: ')}): its scripts could read the host's "
            "environment and write outside their workspace\n"
        )
    for b in d["skills_broken"]:
        w(
            f"  broken       {b['skill']} at tick {b['tick']}: {b['file']}:{b['line']}: "
            f"{b['message']} (its last good version stayed active)\n"
        )
    for r in d["hot_reloads"]:
        parts = [f"{k} {', '.join(r[k])}" for k in ("added", "changed", "removed") if r.get(k)]
        what = "; ".join(parts) or "-"
        w(f"  hot reload   tick {r['tick']} generation {r['generation']}: {what}\n")


def _agent_text(d: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"agent {d['agent_id']}  {d['path']}\n\nprofile\n")
    for k, v in sorted(d["profile"].items()):
        w(f"  {k}: {json.dumps(v, ensure_ascii=False)}\n")
    w("\nactive skills over time\n")
    for c in d["history"]["skills_over_time"]:
        w(f"  tick {c['tick']:>5}  {', '.join(c['active']) or '(none)'}\n")
    steps = d["history"]["last_steps"]
    total = d["history"]["steps_total"]
    more = "  (--last N shows more)" if len(steps) < total else ""
    w(f"\nlast {len(steps)} of {total} steps{more}\n")
    for s in steps:
        w(f"\n-- tick {s['tick']}  {s['time']}  action: {s['action']}\n")
        if s["skill_hooks"]:
            w(s["skill_hooks"] + "\n")
        for c in s["calls"]:
            res = str(c.get("result", ""))
            if len(res) > _RESULT_CHARS:
                res = res[:_RESULT_CHARS] + f"... ({len(res)} chars; --json shows all)"
            w(f"  {c.get('tool')} {c.get('args')}\n    -> {res}\n")
        for text in s.get("reasoning") or ():
            first = text.strip().splitlines()[0] if text.strip() else ""
            w(f"  reasoning: {first[:_RESULT_CHARS]}\n")
        if s["limitation"]:
            w(f"  limitation: {s['limitation']}\n")
    w("\nworkspace files\n")
    for f in d["files"]:
        w(f"  {f['size']:>10,}  {f['path']}\n")


def _skill_versions(
    run_dir: Path, agent: AgentRecord, tick: int
) -> tuple[list[dict[str, Any]], str]:
    """Each skill active for ``agent`` at ``tick`` with the version it had then (from
    ``RUN/skills/versions.jsonl``), and what keeps versions from being known ("" if none)."""
    from agentsim.skills.provenance import read_provenance

    active = agent.skills_at(tick)
    try:
        known = read_provenance(run_dir).at(tick, agent_id=agent.agent_id)
        missing = ""
    except AgentsimError as exc:
        known, missing = {}, str(exc)
    out = []
    for sid in active:
        row = known.get(sid)
        out.append(
            {
                "skill_id": sid,
                "version": row.version if row else None,
                "tick": row.tick if row else None,
                "source": row.source if row else None,
                "files": dict(row.files) if row else {},
            }
        )
    return out, missing


def _cmd_inspect(args: argparse.Namespace) -> int:
    from agentsim.inspect.run import open_run
    from agentsim.inspect.summary import summarize

    out: TextIO = sys.stdout
    if args.tick is not None and args.agent is None:
        raise ConfigError(
            "--tick", "needs an agent", "add --agent ID (an agent folder of RUN/agents)"
        )
    if args.last < 0:
        raise ConfigError("--last", f"must be >= 0, got {args.last}", "give a step count like 5")
    run = open_run(args.run)
    if args.agent is None:
        data = summarize(run).to_dict()
        if args.json:
            _dump(data, out)
        else:
            _overview_text(data, out)
        return 0
    agent = run.agent(args.agent)
    if args.tick is not None:
        prompt = agent.prompt_at(args.tick)
        reasoning = agent.step_at(args.tick).reasoning
        versions, missing = _skill_versions(run.path, agent, args.tick)
        if args.json:
            _dump(
                {
                    **prompt.to_dict(),
                    "messages": prompt.messages,
                    "reasoning": list(reasoning),
                    "skill_versions": versions,
                },
                out,
            )
        else:
            out.write(f"=== system ({prompt.system_sha}) ===\n{prompt.system}\n")
            out.write(f"=== user (tick {prompt.tick}, {prompt.time}) ===\n{prompt.user}\n")
            for i, text in enumerate(reasoning, 1):
                out.write(f"=== reasoning {i} of {len(reasoning)} (not part of any answer) ===\n")
                out.write(f"{text}\n")
            out.write(f"=== active skills (tick {args.tick}) ===\n")
            for v in versions:
                version = v["version"] or "(not recorded)"
                out.write(f"{v['skill_id']}  version {version}  {v['source'] or ''}\n")
            if missing:
                out.write(f"({missing})\n")
        return 0
    data = {
        "agent_id": agent.agent_id,
        "path": str(agent.root),
        "profile": agent.profile(),
        "skills": agent.skills(),
        "history": agent.history(last=args.last).to_dict(),
        "files": [f.to_dict() for f in agent.files()],
    }
    if args.json:
        _dump(data, out)
    else:
        _agent_text(data, out)
    return 0


# -- interview / report -------------------------------------------------------------------


def _cmd_interview(args: argparse.Namespace) -> int:
    from agentsim.inspect.interview import interview

    res = asyncio.run(interview(args.run, args.agent, args.question))
    if args.json:
        _dump(res.to_dict(), sys.stdout)
    else:
        print(res.answer or "(no answer)")
        note = f"[{res.agent_id} at tick {res.tick} ({res.time}); environment {res.environment}; "
        print(note + f"model {res.model}; run folder unchanged]", file=sys.stderr)
        if res.status != "ok":
            print(
                f"status: {res.status}: the answer above is not the model's (see the problems)",
                file=sys.stderr,
            )
        for p in res.problems:
            print(f"problem: {p}", file=sys.stderr)
    return 1 if res.status != "ok" else 0


def _cmd_report(args: argparse.Namespace) -> int:
    from agentsim.inspect.report import write_report

    rep = write_report(args.run, out_dir=Path(args.out) if args.out else None)
    if args.json:
        _dump(
            {
                "dir": str(rep.dir),
                "summary": str(rep.summary),
                "images": {k: str(v) for k, v in rep.images.items()},
            },
            sys.stdout,
        )
    else:
        print(f"wrote {rep.summary}")
        for p in rep.images.values():
            print(f"wrote {p}")
    return 0


def add_inspect_commands(subparsers: Any) -> None:
    """Register ``inspect``, ``interview`` and ``report`` on the ``agentsim`` subparsers."""
    p = subparsers.add_parser("inspect", help="show a run, one agent, or one agent's prompt")
    p.add_argument("run", help="the run folder (workspace/<run-id>)")
    p.add_argument("--agent", metavar="ID", help="show this agent")
    p.add_argument("--tick", type=int, metavar="T", help="with --agent: the prompt at tick T")
    p.add_argument(
        "--last",
        type=int,
        default=HISTORY_LAST,
        metavar="N",
        help="with --agent: show the last N steps (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guarded(_cmd_inspect))

    q = subparsers.add_parser("interview", help="ask one agent a question (changes nothing)")
    q.add_argument("run", help="the run folder (workspace/<run-id>)")
    q.add_argument("--agent", metavar="ID", required=True, help="the agent to ask")
    q.add_argument("question", help='the question, e.g. "How was your day?"')
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(func=_guarded(_cmd_interview))

    r = subparsers.add_parser("report", help="write summary.md and PNG plots of a run")
    r.add_argument("run", help="the run folder (workspace/<run-id>)")
    r.add_argument("--out", metavar="DIR", help="output folder (default: RUN/report)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=_guarded(_cmd_report))
