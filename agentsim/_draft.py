"""Building frozen slots dataclasses on hot paths without their ``__init__``.

A frozen dataclass ``__init__`` pays one ``object.__setattr__`` per field (~2.5 µs for a
nine-field value, measured), which is more than some of the work the value reports on
(a script call, a decoded model answer). Hot paths instead fill an instance of a plain twin
class with ordinary attribute stores and retype it with ``obj.__class__ = cls``: CPython
allows that between classes whose slot layouts are identical, and the object is from then on
a genuine, frozen ``cls``. Every field must be assigned before retyping (slots have no
defaults); the tests of each fast constructor compare it with what ``__init__`` builds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["draft_class"]


def draft_class(cls: type) -> Any:
    """A plain class with the slot layout of the frozen slots dataclass ``cls``."""
    slots = cls.__dict__["__slots__"]
    return type(f"_{cls.__name__}Draft", (), {"__slots__": slots, "__module__": __name__})
