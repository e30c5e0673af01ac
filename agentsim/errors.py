"""The agentsim exception tree. Every error the package raises on purpose is one of these.

    AgentsimError
    ├── ConfigError                 bad experiment YAML / CLI input (exit code 2)
    ├── SkillError
    │   ├── SkillNotFoundError      unknown skill id or name (lists close matches)
    │   ├── SkillFileError          read_skill_file refused or missing file
    │   └── SkillActivationError    prerequisite missing, disabled skill, ...
    ├── ModelError                  a model backend failed after its retries
    │   ├── ModelHTTPError          non-retryable HTTP status
    │   ├── ModelTimeoutError       request or connection timed out
    │   ├── ModelResponseError      the server answered something that is not a completion
    │   ├── CacheMissError          replay mode found no recorded completion
    │   └── PreflightError          the model server failed the check before a run (exit 2)
    ├── EnvError                    unknown environment module or action, bad arguments
    ├── EventError                  an event type or field that agentsim/events.py lacks
    ├── RunError                    a run folder is missing, locked or inconsistent
    │   └── CheckpointError         no usable checkpoint / corrupt checkpoint
    ├── StorageError                the run folder cannot be written (disk full)
    └── ExecutorError               a host (local or Ray actor) failed

All exceptions pickle (Ray ships them between processes): constructor arguments go to
``super().__init__(*args)`` and the message is formatted in ``__str__``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AgentsimError",
    "CacheMissError",
    "CheckpointError",
    "ConfigError",
    "EnvError",
    "EventError",
    "ExecutorError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponseError",
    "ModelTimeoutError",
    "PreflightError",
    "RunError",
    "SkillActivationError",
    "SkillError",
    "SkillFileError",
    "SkillNotFoundError",
    "StorageError",
    "visible",
]


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in "\n\t"}


def visible(text: str) -> str:
    """``text`` with its control characters (but newlines and tabs) written as ``\\xNN``:
    what an untrusted source says (an MCP server's skill, its error text) never reaches the
    terminal as a code it would act on (a title, a cleared screen, a line rewritten by a
    carriage return)."""
    return text.translate(_CONTROL)


class AgentsimError(Exception):
    """Base class of every agentsim error."""

    exit_code: int = 1


class ConfigError(AgentsimError):
    """Invalid experiment configuration or command-line input.

    ``field`` is the dotted path of the offending field ("agents.0.count"), or "" when the
    problem is the file as a whole.
    """

    exit_code = 2

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        super().__init__(field, problem, fix)
        self.field = field
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"{where}{self.problem}{fix}"


class SkillError(AgentsimError):
    """Something is wrong with a skill or its use."""


class SkillNotFoundError(SkillError, KeyError):
    """A skill id or name that is not registered (or not visible to this agent)."""

    def __init__(self, name: str, close: Sequence[str] = (), hint: str = "") -> None:
        super().__init__(name, tuple(close), hint)
        self.name = name
        self.close = tuple(close)
        self.hint = hint

    def __str__(self) -> str:
        known = f" (close matches: {', '.join(self.close)})" if self.close else ""
        hint = f"; {self.hint}" if self.hint else ""
        return f"skill {self.name!r} is not registered{known}{hint}"


class SkillFileError(SkillError):
    """``read_skill_file`` refused a path, or the file does not exist."""

    def __init__(self, skill_id: str, path: str, problem: str) -> None:
        super().__init__(skill_id, path, problem)
        self.skill_id = skill_id
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"skill {self.skill_id!r}: cannot read {self.path!r}: {self.problem}"


class SkillActivationError(SkillError):
    """A skill cannot be activated (missing prerequisite, disabled, ...)."""

    def __init__(self, skill: str, problem: str) -> None:
        super().__init__(skill, problem)
        self.skill = skill
        self.problem = problem

    def __str__(self) -> str:
        return f"cannot activate skill {self.skill!r}: {self.problem}"


class ModelError(AgentsimError):
    """A model call failed (after the backend's own retries)."""

    # True when the last attempt failed in a way worth another try (a timeout, a dropped
    # connection, 429/5xx): another server of the model may answer it.
    retryable: bool = False

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(message, attempts)
        self.message = message
        self.attempts = attempts

    def __reduce__(self) -> tuple[type[ModelError], tuple[str], dict[str, int]]:
        return (type(self), (self.message,), {"attempts": self.attempts})

    def __str__(self) -> str:
        tries = f" (after {self.attempts} attempts)" if self.attempts > 1 else ""
        return f"{self.message}{tries}"


class ModelHTTPError(ModelError):
    """The model server answered with a status that is not worth retrying (400, 401, ...)."""


class ModelTimeoutError(ModelError):
    """The model server did not answer in time."""


class ModelResponseError(ModelError):
    """The model server's answer could not be read as a chat completion."""


class CacheMissError(ModelError):
    """Replay mode: the request was never recorded."""


class EnvError(AgentsimError):
    """Unknown environment module or action, or invalid arguments to one."""


class EventError(AgentsimError):
    """An event whose type or fields are not declared in ``agentsim.events`` (a bug in the
    code that wrote it, never in the experiment)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem

    def __str__(self) -> str:
        return self.problem


class RunError(AgentsimError):
    """A run folder is missing, already in use, or inconsistent."""

    exit_code = 2


class PreflightError(ModelError):
    """The model server failed the check made before a run writes anything."""

    exit_code = 2


class StorageError(AgentsimError):
    """The run folder could not be written (disk full, quota, file size limit)."""


class CheckpointError(RunError):
    """No usable checkpoint, or a checkpoint that does not match its run."""


class ExecutorError(AgentsimError):
    """A host failed: a crashed Ray actor, a lost node, a step that could not be delivered."""
