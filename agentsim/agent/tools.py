"""The ReAct tools an agent offers its model, as OpenAI function-calling schemas.

Skill-name arguments are an enum of the agent's visible skills (up to ``ENUM_LIMIT`` names;
beyond that the enum would cost more prompt tokens than the catalog itself, so the schema
says to use ``search_skills`` and names are checked at call time instead).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentsim.skills.manifest import TOOL_NAMES

__all__ = [
    "ENUM_LIMIT",
    "INSTRUCTIONS",
    "READ_ONLY_INSTRUCTIONS",
    "READ_ONLY_TOOLS",
    "TOOL_NAMES",
    "TYPED_INSTRUCTIONS",
    "WRITE_TOOLS",
    "build_tools",
    "describe_tools",
    "skill_call_hint",
    "text_results",
]

ENUM_LIMIT = 256

# The prompt block that tells the model how to use the tools (and, read-only, that it cannot).
INSTRUCTIONS = (
    "<instructions>\nYou act in a simulation, one step at a time. Use the tools: activate a "
    "skill from the catalog when it fits what you need, follow the instructions of your active "
    "skills, run their scripts with execute_skill_script, and query or act on the world with "
    "ask_env. Always end the step by calling finish with a one-line action.\n</instructions>"
)
READ_ONLY_INSTRUCTIONS = (
    "<instructions>\nYou are being interviewed. Answer the question in the first person from "
    "what you remember and know; you cannot change anything. Call finish with your answer.\n"
    "</instructions>"
)
TYPED_INSTRUCTIONS = (
    "<instructions>\nYou are being surveyed. Answer the question in the first person from "
    "what you remember and know, in exactly the form the question asks for and nothing "
    "else.\n</instructions>"
)
WRITE_TOOLS = frozenset({"activate_skill", "deactivate_skill", "execute_skill_script"})
READ_ONLY_TOOLS = tuple(t for t in TOOL_NAMES if t not in WRITE_TOOLS)


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def build_tools(
    handles: Sequence[str],
    modules: Mapping[str, Any],
    *,
    read_only: bool = False,
) -> list[dict[str, Any]]:
    """Tool schemas for an agent that sees ``handles`` and the env ``modules``."""
    name_prop: dict[str, Any] = {"type": "string", "description": "skill name from the catalog"}
    if 0 < len(handles) <= ENUM_LIMIT:
        name_prop["enum"] = sorted(handles)
    module_prop: dict[str, Any] = {"type": "string"}
    if modules:
        module_prop["enum"] = sorted(modules)
    env_doc = "; ".join(
        f"{m}: {', '.join(sorted(actions))}" for m, actions in sorted(modules.items())
    )
    tools = [
        _fn(
            "activate_skill",
            "Load a skill: its instructions join your context and its scripts become callable.",
            {"name": name_prop, "arguments": {"type": "string"}},
            ["name"],
        ),
        _fn("deactivate_skill", "Unload an active skill.", {"name": name_prop}, ["name"]),
        _fn(
            "read_skill_file",
            "Read a file (e.g. references/x.md) inside a skill's folder.",
            {"name": name_prop, "path": {"type": "string"}},
            ["name", "path"],
        ),
        _fn(
            "execute_skill_script",
            "Run a script of an active skill with an argv list; returns its output.",
            {
                "name": name_prop,
                "args": {"type": "array", "items": {"type": "string"}},
                "script": {"type": "string", "description": "relative path; default: the skill's"},
            },
            ["name", "args"],
        ),
        _fn(
            "search_skills",
            "Search all skills (also those not listed in the catalog) by keywords.",
            {"query": {"type": "string"}},
            ["query"],
        ),
        _fn(
            "ask_env",
            f"Query or act on the environment. Actions by module: {env_doc or 'none'}.",
            {"module": module_prop, "action": {"type": "string"}, "args": {"type": "object"}},
            ["module", "action"],
        ),
        _fn(
            "finish",
            "End this step. `action` summarises what you do now; `answer` answers a question.",
            {"action": {"type": "string"}, "answer": {"type": "string"}},
            ["action"],
        ),
    ]
    if read_only:
        return [t for t in tools if t["function"]["name"] not in WRITE_TOOLS]
    return tools


def describe_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """The ``<tool_calls>`` block of the system message for servers without tool support
    (``model.tool_calls: text``): how to write a call, and each tool with its arguments
    (``*``: required)."""
    lines = [
        "<tool_calls>",
        "Call a tool by writing the call in your answer, one block per call:",
        "<tool_call>",
        '{"name": "<tool>", "arguments": {<its arguments as JSON>}}',
        "</tool_call>",
        "You may write several calls in one answer; their results come back in the next "
        "message, in <tool_result> blocks. The tools:",
    ]
    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters", {})
        required = set(params.get("required", ()))
        args = ", ".join(
            f"{name}{'*' if name in required else ''}: {_type_of(prop)}"
            for name, prop in params.get("properties", {}).items()
        )
        lines.append(f"- {fn['name']}({args}): {fn.get('description', '')}")
    lines.append("</tool_calls>")
    return "\n".join(lines)


def _type_of(prop: Mapping[str, Any]) -> str:
    kind = str(prop.get("type", "any"))
    if kind == "array":
        return f"array of {_type_of(prop.get('items', {}))}s"
    if "enum" in prop and prop.get("description"):
        return f"string ({prop['description']})"
    return kind


def text_results(results: Sequence[tuple[str, str]]) -> str:
    """The message that gives a model without tool support its calls' results: a
    ``<tool_result name="...">`` block per (tool, result), in call order."""
    return "\n".join(
        f'<tool_result name="{html.escape(name, quote=True)}">\n{result}\n</tool_result>'
        for name, result in results
    )


def skill_call_hint(handle: str, args: Any, *, active: bool, has_script: bool) -> str:
    """The error for a call to a skill by its name, as if it were a tool: the calls that
    do what the model meant."""
    argv = args.get("args", args.get("argv", [])) if isinstance(args, dict) else args
    if not isinstance(argv, list):
        argv = [] if argv in (None, "", {}) else [str(argv)]
    activate = json.dumps({"name": handle})
    run = json.dumps({"name": handle, "args": [str(a) for a in argv]})
    text = f"error: {handle!r} is a skill, not a tool; "
    if active and has_script:
        return text + f"to run its script call execute_skill_script with {run}"
    if active:
        return text + "it is active already: follow its instructions in your context"
    text += f"load it with activate_skill {activate}"
    if has_script:
        text += f", then run its script with execute_skill_script {run}"
    return text
