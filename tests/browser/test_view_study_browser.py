"""A study in headless Chromium: the Runs page lists the study's runs by arm, and the
Study page shows the comparison's table per measure and draws each arm over the ticks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _serve import serve

from tests.unit.compare.conftest import write_known_study

_WHY = "browser tests need selenium: pip install -e '.[test]'"
WebDriverWait = pytest.importorskip("selenium.webdriver.support.ui", reason=_WHY).WebDriverWait
WAIT = 60
TEXT = "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : '';"
INKED = """
const c = document.getElementById(arguments[0]);
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let n = 0;
for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
return n;
"""


def text(driver: Any, css: str) -> str:
    return str(driver.execute_script(TEXT, css))


def wait_for(driver: Any, check: Any, what: str) -> Any:
    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(
        lambda d: check(d), message=f"waited {WAIT} s for {what}"
    )


def test_the_study_is_listed_and_its_comparison_shown(browser: Any, tmp_path: Path) -> None:
    study = write_known_study(tmp_path)
    with serve(study) as url:
        browser.get(f"{url}/#/")
        wait_for(browser, lambda d: text(d, "[data-study='study']"), "the study on the Runs page")
        arm = text(browser, "[data-study='study'] [data-arm='closure']")
        assert arm.startswith("closure (forked at tick 1): closure-r1 (complete)")
        browser.get(f"{url}/#/study/study")
        wait_for(browser, lambda d: text(d, "[data-item='measure-mood']"), "the comparison")
        row = text(browser, "[data-item='measure-mood'] tr[data-arm='closure']")
        assert "+2.000 [" in row and "(paired t, 3 pairs)" in row and "(vs control)" in row
        single = text(browser, "[data-item='measure-mood'] tr[data-arm='single']")
        assert "1.000 (no interval: 1 replicate)" in single
        assert browser.execute_script(INKED, "cmp-chart-0") > 100
