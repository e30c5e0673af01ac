"""Reading a registered skill's body and files, with the path rules of ``read_skill_file``."""

from __future__ import annotations

import os

from agentsim._paths import is_inside
from agentsim.errors import SkillFileError
from agentsim.skills._descriptor import SkillDescriptor
from agentsim.skills._frontmatter import (
    MAX_SKILL_MD_BYTES,
    Diagnostic,
    decode_skill_md,
    read_frontmatter,
    read_skill_bytes,
)
from agentsim.skills._paths import path_problem

__all__ = ["DocCache", "list_skill_files", "read_doc", "read_file"]

_MAX_LISTED = 50


class DocCache:
    """Bodies by SKILL.md path, with the (mtime_ns, size) they were read at.

    One per registry and shared by its snapshots and views; it is per process, so it
    pickles empty (a Ray actor rebuilds it on first use).
    """

    __slots__ = ("_bodies",)

    def __init__(self) -> None:
        self._bodies: dict[str, tuple[int, int, str]] = {}

    def __reduce__(self) -> tuple[type[DocCache], tuple[()]]:
        return (DocCache, ())

    def __len__(self) -> int:
        return len(self._bodies)


def read_doc(desc: SkillDescriptor, cache: DocCache) -> str:
    md = desc.skill_md
    try:
        st = os.stat(md)
    except OSError as exc:
        raise SkillFileError(
            desc.skill_id, "SKILL.md", f"{exc.strerror}; refresh the registry"
        ) from None
    hit = cache._bodies.get(md)
    if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return hit[2]
    got = read_skill_bytes(md)
    if isinstance(got, Diagnostic):
        raise SkillFileError(desc.skill_id, "SKILL.md", got.message)
    text = decode_skill_md(got[0], source=md)
    if isinstance(text, Diagnostic):
        raise SkillFileError(desc.skill_id, "SKILL.md", text.message)
    front = read_frontmatter(text, source=md)
    if front.data is None:
        raise SkillFileError(desc.skill_id, "SKILL.md", str(front.diagnostics[-1]))
    body = front.body
    st = got[1]  # the file that was read: the cache key and the body agree
    cache._bodies[md] = (st.st_mtime_ns, st.st_size, body)
    return body


def list_skill_files(folder: str) -> list[str]:
    """Relative paths of the files in a skill folder, sorted; hidden and cache folders
    are left out."""
    out: list[str] = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        rel_dir = os.path.relpath(here, folder)
        for name in sorted(files):
            if not name.startswith("."):
                rel = name if rel_dir == "." else os.path.join(rel_dir, name)
                out.append(rel.replace(os.sep, "/"))
    return out


def read_file(desc: SkillDescriptor, relative_path: str) -> str:
    problem = path_problem(relative_path)
    if problem:
        raise SkillFileError(desc.skill_id, str(relative_path), f"refused: {problem}")
    real = os.path.realpath(os.path.join(desc.path, relative_path))
    if not is_inside(real, desc.path):
        raise SkillFileError(
            desc.skill_id,
            relative_path,
            "refused: it resolves outside the skill folder (a symlink); copy the file "
            "into the skill",
        )
    if not os.path.isfile(real):
        files = list_skill_files(desc.path)
        shown = ", ".join(files[:_MAX_LISTED])
        more = f" and {len(files) - _MAX_LISTED} more" if len(files) > _MAX_LISTED else ""
        raise SkillFileError(
            desc.skill_id,
            relative_path,
            f"no such file; the skill's files are: {shown}{more}",
        )
    if os.path.getsize(real) > MAX_SKILL_MD_BYTES:
        raise SkillFileError(
            desc.skill_id, relative_path, "it is over the 1 MiB limit for reading into a prompt"
        )
    with open(real, "rb") as fh:
        raw = fh.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFileError(
            desc.skill_id, relative_path, "it is not UTF-8 text; only text files can be read"
        ) from None
