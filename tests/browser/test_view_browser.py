"""`agentsim view` in headless Chromium: every page renders a real run, the world moves with
the tick, a run still going is followed without a reload, an interview changes nothing, and
traversal is refused. Waits are explicit (WebDriverWait); nothing sleeps to assert."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _serve import serve

from agentsim.config.experiment import load_experiment, parse_experiment
from agentsim.run.engine import Engine

# Without selenium the module is skipped (with the reason), not an import error.
_WHY = "browser tests need selenium: pip install -e '.[test]'"
By = pytest.importorskip("selenium.webdriver.common.by", reason=_WHY).By
Keys = pytest.importorskip("selenium.webdriver.common.keys", reason=_WHY).Keys
WebDriverWait = pytest.importorskip("selenium.webdriver.support.ui", reason=_WHY).WebDriverWait
Stale = pytest.importorskip(
    "selenium.common.exceptions", reason=_WHY
).StaleElementReferenceException

EXPERIMENT = Path(__file__).parents[1] / "fixtures" / "experiments" / "small.yaml"
WAIT = 60  # seconds: generous, for a loaded CI machine
AGENT = "workers-00000"

# How many pixels of a canvas are drawn (not transparent).
INKED = """
const c = document.getElementById(arguments[0]);
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let n = 0;
for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
return n;
"""


def wait_for(driver: Any, check: Any, what: str) -> Any:
    # A page that re-renders while it is polled can replace an element between finding it
    # and reading it: that read is tried again, as any other not-yet.
    return WebDriverWait(driver, WAIT, poll_frequency=0.1, ignored_exceptions=(Stale,)).until(
        lambda d: check(d), message=f"waited {WAIT} s for {what}"
    )


# The visible text of the first match, read in one step inside the page (so that a re-render
# between finding and reading cannot leave a stale element).
TEXT = "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : '';"


def text(driver: Any, css: str) -> str:
    return str(driver.execute_script(TEXT, css))


def folder_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(p.relative_to(root).as_posix().encode())
        if p.is_file():
            h.update(p.read_bytes())
            h.update(str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


def test_runs_page_lists_the_run(browser: Any, viewer: str) -> None:
    browser.get(f"{viewer}/#/")
    row = 'tr[data-run="small-1"]'
    wait_for(browser, lambda d: text(d, f"{row} .ticks") == "6 / 6", "the run's ticks")
    assert text(browser, f"{row} .status") == "completed"
    cells = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((c) => c.innerText.trim());",
        f"{row} td",
    )
    assert cells[4:6] == ["20", "0"]  # agents, errors


def test_run_page_draws_metrics_markers_surveys_and_agents(browser: Any, viewer: str) -> None:
    browser.get(f"{viewer}/#/run/small-1")
    wait_for(browser, lambda d: "tick 6 / 6" in text(d, "#tick-counter"), "the tick counter")
    for chart in ("chart-steps", "chart-tokens", "chart-failures", "chart-skills"):
        assert browser.execute_script(INKED, chart) > 500, chart
    markers = text(browser, "#markers")
    assert "tick 3 · intervention: city: close_place" in markers
    assert "tick 3 · survey: survey check" in markers
    wait_for(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-survey="check"] li')) == 4,
        "the survey's 4 answers",
    )
    assert "How is your day going?" in text(browser, '[data-survey="check"]')
    wait_for(browser, lambda d: text(d, "#agent-count") == "1-20 of 20", "the agent list")
    search = browser.find_element(By.ID, "agent-search")
    search.send_keys("posters-0000")
    wait_for(browser, lambda d: text(d, "#agent-count") == "1-8 of 8", "the search result")


def test_world_view_moves_agents_when_the_tick_changes(browser: Any, viewer: str) -> None:
    browser.get(f"{viewer}/#/world/small-1")
    world = (By.ID, "world")
    wait_for(browser, lambda d: d.find_element(*world).get_attribute("data-tick") == "0", "tick 0")
    assert browser.execute_script(INKED, "world") > 1000
    digest0 = browser.find_element(*world).get_attribute("data-digest")
    pixels0 = browser.execute_script("return document.getElementById('world').toDataURL()")
    occupancy0 = text(browser, "#occupancy")
    slider = browser.find_element(By.ID, "tick-slider")
    slider.send_keys(Keys.END)  # as a user would: to the last tick
    wait_for(browser, lambda d: d.find_element(*world).get_attribute("data-tick") == "5", "tick 5")
    assert text(browser, "#tick-label") == "tick 5"
    assert browser.find_element(*world).get_attribute("data-digest") != digest0
    assert browser.execute_script("return document.getElementById('world').toDataURL()") != pixels0
    assert text(browser, "#occupancy") != occupancy0
    slider.send_keys(Keys.HOME)
    wait_for(browser, lambda d: d.find_element(*world).get_attribute("data-tick") == "0", "back")
    assert browser.find_element(*world).get_attribute("data-digest") == digest0
    browser.find_element(By.ID, "play").click()
    wait_for(browser, lambda d: d.find_element(*world).get_attribute("data-tick") == "2", "play")
    browser.find_element(By.ID, "play").click()
    assert int(browser.execute_script(INKED, "graph")) > 100
    assert int(browser.find_element(By.ID, "graph").get_attribute("data-edges")) > 0
    assert browser.execute_script(INKED, "opinions") > 100


def test_agent_page_shows_timeline_prompt_and_answers_an_interview(
    browser: Any, viewer: str, finished: Path
) -> None:
    browser.get(f"{viewer}/#/agent/small-1/{AGENT}")
    step = '.step[data-tick="2"]'
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, step), "the step of tick 2")
    assert "Toel" in text(browser, "#profile")
    assert "built-in@daily-guidance" in text(browser, "#skills-active")
    assert browser.execute_script(INKED, "skills-over-time") > 200
    assert text(browser, f"{step} .observation").startswith("tick: 2")
    assert "<skill_hooks>" in text(browser, f"{step} .skill-hooks")
    assert browser.find_elements(By.CSS_SELECTOR, f"{step} .call")
    assert "moved to office-4" in text(browser, f"{step} .action")
    browser.find_element(By.CSS_SELECTOR, f"{step} .show-prompt").click()
    wait_for(
        browser, lambda d: "<available_skills>" in text(d, "#prompt-system"), "the system prompt"
    )
    assert "tick: 2" in text(browser, "#prompt-user")

    before = folder_hash(finished)
    question = browser.find_element(By.ID, "interview-question")
    question.clear()
    question.send_keys("Where did you go today?")
    browser.find_element(By.ID, "interview-ask").click()
    wait_for(browser, lambda d: text(d, "#interview-answer .answer"), "the interview's answer")
    assert "Today I went to" in text(browser, "#interview-answer .answer")
    assert folder_hash(finished) == before


def test_a_run_without_social_says_so_instead_of_drawing(browser: Any, tmp_path: Path) -> None:
    spec = yaml.safe_load(EXPERIMENT.read_text(encoding="utf-8"))
    spec["environment"] = [m for m in spec["environment"] if m["module"] == "city"]
    spec["agents"] = [g for g in spec["agents"] if g["group"] == "workers"]
    spec["workflow"] = [{"run": {"ticks": 2}}]
    cfg = parse_experiment(yaml.safe_dump(spec), base_dir=EXPERIMENT.parent)
    ws = tmp_path / "workspace"
    asyncio.run(Engine(cfg, run_dir=ws / "city-1").run())
    with serve(ws) as url:
        browser.get(f"{url}/#/world/city-1")
        wait_for(browser, lambda d: "tick 2 done" in text(d, "#tick-counter"), "the world view")
        assert "No module of this run has a follow graph." in text(browser, "body")
        assert "No module of this run logs opinions." in text(browser, "body")
        shown = "return document.getElementById(arguments[0]).offsetParent !== null;"
        assert browser.execute_script(shown, "world") is True
        assert browser.execute_script(shown, "graph") is False
        assert browser.execute_script(shown, "opinions") is False


def test_a_run_without_a_city_draws_no_map_and_every_colour_has_a_legend(
    browser: Any, tmp_path: Path
) -> None:
    spec = yaml.safe_load(EXPERIMENT.read_text(encoding="utf-8"))
    spec["environment"] = [m for m in spec["environment"] if m["module"] == "social"]
    for group in spec["agents"]:
        group["skills"] = {"default": ["social-feed"]}
    spec["workflow"] = [{"run": {"ticks": 2}}]
    cfg = parse_experiment(yaml.safe_dump(spec), base_dir=EXPERIMENT.parent)
    ws = tmp_path / "workspace"
    asyncio.run(Engine(cfg, run_dir=ws / "social-1").run())
    with serve(ws) as url:
        browser.get(f"{url}/#/world/social-1")
        wait_for(browser, lambda d: "tick 2 done" in text(d, "#tick-counter"), "the world view")
        shown = "return document.getElementById(arguments[0]).offsetParent !== null;"
        # No city: no map, no occupancy ("in transit 20"), a line that says why.
        assert browser.execute_script(shown, "map-card") is False
        assert browser.execute_script(shown, "occupancy-card") is False
        assert "No module of this run has places to draw (modules: social)" in text(
            browser, "#no-map"
        )
        # The follow graph's colours are the groups; the heat map says what its shades are.
        assert text(browser, "#graph-legend").split("\n") == ["group posters", "group workers"]
        assert "mean opinion" in text(browser, "#opinions-legend")
        assert browser.execute_script(INKED, "opinions") > 100


def test_the_runs_page_marks_a_run_with_problems(browser: Any, finished: Path) -> None:
    import json
    import shutil

    ws = finished.parent / "problems-ws"
    shutil.copytree(finished / "small-1", ws / "broken-1")
    metrics = json.loads((ws / "broken-1" / "metrics.json").read_text("utf-8"))
    metrics["problems"] = {**metrics["problems"], "hook_failed": 7}
    (ws / "broken-1" / "metrics.json").write_text(json.dumps(metrics), "utf-8")
    shutil.copytree(finished / "small-1", ws / "clean-1")
    with serve(ws) as url:
        browser.get(f"{url}/#/")
        row = 'tr[data-run="broken-1"]'
        wait_for(browser, lambda d: text(d, f"{row} .ticks") == "6 / 6", "the runs")
        assert text(browser, f"{row} .problems") == "⚠ problems"
        title = browser.execute_script(
            "return document.querySelector(arguments[0]).title;", f"{row} .problems"
        )
        assert title == "7 hook failed"
        assert text(browser, 'tr[data-run="clean-1"] .problems') == ""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/runs/..%2F..%2Fetc%2Fpasswd", "is not served"),
        ("/api/runs/%2Fetc%2Fpasswd", "is not served"),
        ("/api/runs/%2E%2E/status", "is not served"),  # Chromium resolves the dots
        ("/api/runs/small-1/agents/%2E%2E%2F%2E%2E", "is not served"),
        ("/static/..%2F..%2Fcli.py", "Not Found"),
    ],
    ids=["dotdot", "absolute", "encoded-dots", "agent-dotdot", "static"],
)
def test_traversal_is_refused(browser: Any, viewer: str, path: str, expected: str) -> None:
    browser.get(viewer + path)
    body = wait_for(browser, lambda d: text(d, "body"), "the response")
    assert expected in body and "root:" not in body and "create_app" not in body


def test_a_page_for_a_path_outside_the_workspace_shows_the_refusal(
    browser: Any, viewer: str
) -> None:
    browser.get(f"{viewer}/#/run/..%2F..%2Fetc")
    wait_for(browser, lambda d: "not served" in text(d, "#error"), "the error")


class PacedRun:
    """An engine in a thread that waits for ``step()`` after each tick."""

    def __init__(self, run_dir: Path) -> None:
        self.gate = threading.Semaphore(0)
        self.at_gate = threading.Event()  # set once the first tick has ended
        self.free = False
        self.engine = Engine(
            load_experiment(EXPERIMENT),
            run_dir=run_dir,
            # After each tick; a survey's progress reports (Progress.survey) pass.
            progress=lambda p: self._wait() if p.survey is None else None,
        )
        self.thread = threading.Thread(target=lambda: asyncio.run(self.engine.run()))

    def _wait(self) -> None:
        self.at_gate.set()
        if not self.free:
            self.gate.acquire(timeout=4 * WAIT)  # a safety net: never hangs a failed test

    def finish(self) -> None:
        self.free = True
        self.gate.release()
        self.thread.join(timeout=2 * WAIT)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Path, PacedRun]]:
    ws = tmp_path / "workspace"
    paced = PacedRun(ws / "live-1")
    paced.thread.start()
    assert paced.at_gate.wait(timeout=WAIT), "the paced run did not end its first tick"
    try:
        yield ws, paced
    finally:
        paced.finish()


def test_a_running_run_is_followed_without_a_reload(
    browser: Any, live: tuple[Path, PacedRun]
) -> None:
    ws, paced = live
    with serve(ws) as url:
        browser.get(f"{url}/#/run/live-1")
        wait_for(browser, lambda d: "tick 1 / 6" in text(d, "#tick-counter"), "tick 1")
        assert text(browser, "#live").startswith("● live")
        browser.execute_script("window.sameDocument = 'yes'")
        paced.gate.release()
        wait_for(browser, lambda d: "tick 2 / 6" in text(d, "#tick-counter"), "tick 2")
        paced.gate.release()
        wait_for(browser, lambda d: "tick 3 / 6" in text(d, "#tick-counter"), "tick 3")
        assert browser.execute_script("return window.sameDocument") == "yes"  # not reloaded
        browser.get(f"{url}/#/")
        wait_for(browser, lambda d: text(d, 'tr[data-run="live-1"] .status') == "running", "row")
        paced.gate.release()
        wait_for(browser, lambda d: text(d, 'tr[data-run="live-1"] .ticks') == "4 / 6", "4 / 6")
        paced.finish()
        wait_for(browser, lambda d: text(d, 'tr[data-run="live-1"] .status') == "completed", "end")


_FAILING = """
name: mend
seed: 4
clock: {start: "2026-03-02T08:00:00", tick: 1h}
workflow:
  - run: {ticks: 2}
  - intervene: {env: city, action: open_place, args: {place: park-1}}
  - run: {ticks: 1}
agents: [{group: people, count: 3, profile: {template: worker}}]
model: {backend: scripted}
environment: [{module: city}]
output: {formats: [jsonl], checkpoint_every: 1}
"""


@pytest.fixture(scope="module")
def mended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with a run that failed at its intervention and the fork that mended it."""
    from agentsim.cli import main

    root = tmp_path_factory.mktemp("mend")
    exp = root / "exp.yaml"
    exp.write_text(_FAILING, encoding="utf-8")
    ws = root / "workspace"
    assert main(["run", str(exp), "--out", str(ws / "broken"), "--json"]) == 1
    fork = ["--fork", str(ws / "broken"), "--at", "2", "--out", str(ws / "fixed"), "--json"]
    assert main(["run", *fork, "--set", "workflow.1.intervene.action=close_place"]) == 0
    return ws


def test_runs_and_run_pages_show_why_a_run_stopped_and_its_lineage(
    browser: Any, mended: Path
) -> None:
    why = "city.open_place: 'park-1' is not closed; nothing to open (workflow.1.intervene, tick 2)"
    with serve(mended) as url:
        browser.get(f"{url}/#/")
        broken, fixed = 'tr[data-run="broken"]', 'tr[data-run="fixed"]'
        wait_for(browser, lambda d: text(d, f"{fixed} .lineage") != "", "the fork's lineage")
        assert text(browser, f"{fixed} .lineage") == "forked from broken at tick 2"
        assert text(browser, f"{broken} .status") == "failed"
        title = browser.execute_script(
            "return document.querySelector(arguments[0]).title;", f"{broken} .status"
        )
        assert title == why
        browser.get(f"{url}/#/run/broken")
        wait_for(browser, lambda d: text(d, "#run-reason") != "", "the reason")
        assert text(browser, "#run-reason") == f"reason: {why}"
        browser.get(f"{url}/#/run/fixed")
        wait_for(browser, lambda d: text(d, "#run-lineage") != "", "the lineage")
        assert text(browser, "#run-lineage") == "forked from broken at tick 2"
        assert text(browser, "#run-reason") == ""


def test_the_run_page_splits_calls_per_model(browser: Any, tmp_path: Path) -> None:
    spec = yaml.safe_load(EXPERIMENT.read_text(encoding="utf-8"))
    spec["models"] = {"fast": {"backend": "scripted"}}
    spec["agents"][1]["model"] = "fast"
    spec["workflow"] = [{"run": {"ticks": 2}}]
    cfg = parse_experiment(yaml.safe_dump(spec), base_dir=EXPERIMENT.parent)
    ws = tmp_path / "workspace"
    asyncio.run(Engine(cfg, run_dir=ws / "models-1").run())
    with serve(ws) as url:
        browser.get(f"{url}/#/run/models-1")
        wait_for(browser, lambda d: "model fast" in text(d, "#models"), "the models card")
        shown = text(browser, "#models")
        assert "model default" in shown and "calls" in shown
