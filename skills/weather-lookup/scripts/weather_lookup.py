"""weather-lookup (deprecated): the town's weather for one hour, as one JSON object.

The weather is the same for every agent: it depends only on the date and the hour (a
sha256 of the date), so runs stay reproducible without any weather data.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime
from typing import Protocol

# Mean daily temperature (deg C) by month, a temperate town.
_MONTH_MEAN = (2.0, 3.0, 7.0, 11.0, 15.0, 18.0, 20.0, 20.0, 16.0, 11.0, 6.0, 3.0)


class _Ctx(Protocol):
    @property
    def time(self) -> datetime: ...


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def weather(when: datetime, hour: int) -> dict[str, object]:
    day = when.date().isoformat()
    offset = (_unit(day, "temp") - 0.5) * 8.0
    diurnal = -4.0 * math.cos((hour - 3) / 24 * 2 * math.pi)
    wet_day = _unit(day, "wet") < 0.35
    rain = round(_unit(day, hour, "rain") * 3.0, 1) if wet_day and _unit(day, hour) < 0.5 else 0.0
    cloudy = wet_day or _unit(day, "cloud") < 0.4
    condition = "rain" if rain > 0 else "cloudy" if cloudy else "sunny"
    return {
        "date": day,
        "hour": hour,
        "condition": condition,
        "temp_c": round(_MONTH_MEAN[when.month - 1] + offset + diurnal, 1),
        "rain_mm": rain,
        "outdoor_ok": rain == 0,
    }


def entrypoint(argv: list[str], ctx: _Ctx) -> str:
    """argv: ``[--hour H]`` (0..23, default the current hour)."""
    hour = ctx.time.hour
    if "--hour" in argv:
        i = argv.index("--hour")
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if not value.isdigit() or not 0 <= int(value) <= 23:
            raise ValueError(f"weather-lookup: --hour needs a whole hour 0..23; got {value!r}")
        hour = int(value)
    return json.dumps(weather(ctx.time, hour), sort_keys=True)
