"""Reading an experiment's YAML safely: a size limit, a limit on what aliases expand to, no
key given twice in one mapping, and syntax errors that say where.

PyYAML shares one object per anchor, so a small file of nested aliases ("billion laughs") loads
in microseconds and then makes everything that walks the result (validation, hashing, dumping)
walk billions of nodes. The composed node graph is measured before any Python object is built.
"""

from __future__ import annotations

from typing import Any

import yaml

from agentsim.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "MAX_CONFIG_NODES", "read_yaml_mapping"]

MAX_CONFIG_BYTES = 1_000_000
"""Largest experiment file; profiles and places live in their own files."""
MAX_CONFIG_NODES = 100_000
"""Most YAML nodes an experiment may hold once its aliases are expanded."""
MAX_CONFIG_DEPTH = 64
"""Deepest nesting of lists and mappings in an experiment file."""

_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml_mapping(text: str, *, source: str) -> dict[str, Any]:
    """The top-level mapping of an experiment's YAML text, or a ``ConfigError`` naming
    ``source`` (and the line, for syntax errors)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            "",
            f"{source} is {size:,} bytes, more than the {MAX_CONFIG_BYTES:,} an experiment "
            "file may hold",
            "keep agents' profiles and places in their own files (agents[].profiles, "
            "environment[].places)",
        )
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, source) from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{source} is not valid YAML: {exc}", "fix the YAML syntax") from None
    except ValueError as exc:
        # An integer literal too long for int() (Python's digit limit) ends up here.
        raise ConfigError(
            "", f"{source} holds a value YAML cannot read: {exc}", "shorten it"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(
            "",
            f"{source} must hold a mapping of fields, got {type(data).__name__}",
            "start the file with `name: ...`, `agents: ...` and `ticks: ...` lines",
        )
    return data


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Count the nodes ``root`` stands for with every alias expanded, each shared node once
    (memoised), and refuse cycles, nesting deeper than ``MAX_CONFIG_DEPTH`` and totals above
    ``MAX_CONFIG_NODES``."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node, depth: int, path: tuple[str, ...]) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(
                "",
                f"{source}: lists and mappings are nested more than {MAX_CONFIG_DEPTH} levels "
                f"deep (at line {node.start_mark.line + 1})",
                "flatten the structure",
            )
        if key in on_path:
            raise ConfigError(
                "",
                f"{source}: an alias refers to a node that contains it "
                f"(line {node.start_mark.line + 1})",
                "remove the recursive alias (*name inside the &name it points to)",
            )
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(
                size(child, depth + 1, (*path, str(i))) for i, child in enumerate(node.value)
            )
        elif isinstance(node, yaml.MappingNode):
            _check_unique_keys(node, source, path)
            total += sum(
                size(k, depth + 1, path) + size(v, depth + 1, (*path, _key_text(k)))
                for k, v in node.value
            )
        on_path.discard(key)
        if total > MAX_CONFIG_NODES:
            raise ConfigError(
                "",
                f"{source}: its aliases expand to more than {MAX_CONFIG_NODES:,} values "
                f"(at line {node.start_mark.line + 1})",
                "write the values out or use fewer nested aliases (*name)",
            )
        sizes[key] = total
        return total

    size(root, 0, ())


def _key_text(node: yaml.Node) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else "?"


def _check_unique_keys(node: yaml.MappingNode, source: str, path: tuple[str, ...]) -> None:
    """Refuse a mapping that names one key twice (YAML readers differ on which one wins;
    PyYAML silently keeps the last)."""
    first: dict[tuple[str, str], int] = {}
    for k, _ in node.value:
        if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
            continue
        seen = first.get((k.tag, k.value))
        if seen is None:
            first[(k.tag, k.value)] = k.start_mark.line + 1
        else:
            raise ConfigError(
                ".".join((*path, str(k.value))),
                f"the key {k.value!r} is given twice (lines {seen} and "
                f"{k.start_mark.line + 1} of {source})",
                "keep one of them",
            )


def _syntax_error(exc: yaml.MarkedYAMLError, source: str) -> ConfigError:
    mark, ctx = exc.problem_mark, exc.context_mark
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    if ctx is not None and exc.context and (mark is None or ctx.line != mark.line):
        # The problem is often found at the end of the file; say where it started.
        at += f" ({exc.context} started at line {ctx.line + 1})"
    return ConfigError(
        "",
        f"{source} is not valid YAML{at}: {exc.problem or 'syntax error'}",
        "fix the indentation, quoting or colons there",
    )
