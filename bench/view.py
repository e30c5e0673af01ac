"""`agentsim view` in headless Chromium on a finished run of many agents. Prints JSON.

    python bench/view.py                          # 10,000 agents x 6 ticks (scripted model)
    python bench/view.py --agents 2000 --screenshots docs

Measured from navigation (``performance.now()`` when the page's first render ended): the Run
page, an Agent page and the World page; and moving the World view's tick slider one step
(input event to the next painted frame). Targets: run page < 1 s, agent page < 300 ms,
slider step < 100 ms. Each page is loaded ``--repeat`` times; the first load (cold caches on
the server) and the median are reported. Needs chromium and chromedriver from the system's
packages (apt-get install chromium chromium-driver) and selenium.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "browser"))

from _serve import missing_browser, serve, start_chrome

_YAML = """
name: bench-view
seed: 11
clock: {{start: "2026-03-02T07:00:00", tick: 30m}}
workflow:
  - run: {{ticks: {half}}}
  - intervene: {{env: city, action: close_place, args: {{place: park-1}}}}
  - survey: {{name: midday, question: "How is your day going?", agents: {{sample: 20}}}}
  - run: {{ticks: {half}}}
agents:
  - group: workers
    count: {workers}
    profile: {{template: worker}}
    skills: {{default: [daily-guidance]}}
  - group: posters
    count: {posters}
    profile: {{template: generic}}
    skills: {{default: [social-feed]}}
model: {{backend: scripted}}
environment:
  - {{module: city}}
  - {{module: social, follow_k: 3, topic: the new city park}}
output: {{dir: workspace, checkpoint_every: 0}}
"""

# Move the slider one step and resolve when the frame after the redraw is painted.
_SLIDER_STEP = """
const done = arguments[arguments.length - 1];
const s = document.getElementById('tick-slider');
const t0 = performance.now();
s.value = String((Number(s.value) + 1) % (Number(s.max) + 1));
s.dispatchEvent(new Event('input'));
requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t0)));
"""


def make_run(root: Path, agents: int, ticks: int) -> tuple[Path, float]:
    from agentsim.config.experiment import load_experiment
    from agentsim.run.engine import Engine

    posters = max(1, agents // 5)
    half = max(1, ticks // 2)
    exp = root / "bench-view.yaml"
    exp.write_text(
        _YAML.format(half=half, workers=agents - posters, posters=posters), encoding="utf-8"
    )
    run_dir = root / "workspace" / "bench-view"
    t0 = time.perf_counter()
    asyncio.run(Engine(load_experiment(exp), run_dir=run_dir).run())
    return run_dir, time.perf_counter() - t0


def first_render(driver: Any, url: str) -> float:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    driver.get(url)
    WebDriverWait(driver, 120, poll_frequency=0.02).until(
        lambda d: d.execute_script("return document.body.dataset.renderedMs")
    )
    return float(driver.execute_script("return document.body.dataset.renderedMs"))


def take_screenshots(driver: Any, pages: dict[str, str], out: Path) -> None:
    """One PNG per page, each once its data is in: survey answers and agents listed, the
    world at its middle tick, an agent's prompt and an interview answer shown."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def until(check: Any) -> None:
        WebDriverWait(driver, 120, poll_frequency=0.05).until(check)

    def shown(css: str) -> Any:
        return lambda d: d.find_elements(By.CSS_SELECTOR, css)

    for name, url in pages.items():
        # The Runs page of one run is a single row: a short window keeps the picture small.
        driver.set_window_size(1400, 440 if name == "runs_page" else 1250)
        first_render(driver, url)
        if name == "run_page":
            until(shown("[data-survey] li"))
            until(shown("#agent-list li"))
        elif name == "world_page":
            driver.execute_script(
                "const s = document.getElementById('tick-slider');"
                "s.value = String(Math.floor(Number(s.max) / 2));"
                "s.dispatchEvent(new Event('input'));"
            )
        elif name == "agent_page":
            driver.find_element(By.CSS_SELECTOR, ".step .show-prompt").click()
            until(shown("#prompt-system"))
            driver.find_element(By.ID, "interview-ask").click()
            until(shown("#interview-answer .answer"))
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(str(out / f"view-{name.removesuffix('_page')}.png"))


def summary(values: list[float]) -> dict[str, float]:
    return {"first_ms": round(values[0], 1), "median_ms": round(statistics.median(values), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--ticks", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--screenshots", metavar="DIR", help="save a PNG of each page here")
    args = ap.parse_args()
    why = missing_browser()
    if why:
        print(json.dumps({"skipped": why}))
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-view-") as tmp:
        run_dir, run_s = make_run(Path(tmp), args.agents, args.ticks)
        agent = "workers-00000"
        driver = start_chrome(1400, 1000)
        try:
            with serve(run_dir.parent) as url:
                base = f"{url}/#/"
                pages = {
                    "runs_page": base,
                    "run_page": f"{base}run/{run_dir.name}",
                    "agent_page": f"{base}agent/{run_dir.name}/{agent}",
                    "world_page": f"{base}world/{run_dir.name}",
                }
                out: dict[str, Any] = {
                    "agents": args.agents,
                    "ticks": args.ticks,
                    "run_seconds": round(run_s, 1),
                }
                for name, page_url in pages.items():
                    out[name] = summary(
                        [first_render(driver, page_url) for _ in range(args.repeat)]
                    )
                    if args.screenshots:
                        shot = Path(args.screenshots) / f"view-{name.removesuffix('_page')}.png"
                        driver.execute_script("window.scrollTo(0, 0)")
                        driver.save_screenshot(str(shot))
                # The world page is open: step its slider.
                steps = [
                    float(driver.execute_async_script(_SLIDER_STEP)) for _ in range(4 * args.repeat)
                ]
                out["world_slider_step"] = summary(steps)
                out["targets_ms"] = {"run_page": 1000, "agent_page": 300, "world_slider_step": 100}
                if args.screenshots:
                    take_screenshots(driver, pages, Path(args.screenshots))
        finally:
            driver.quit()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
