"""Screenshots of the console's views for the README, taken in headless Chromium on the example
snapshot (the browser tests' set-up): docs/images/console-<view>.png.

    python -m tests.browser.screenshots [--out docs/images]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.browser.harness import ROOT, WAITING, chromium, example_extender, missing_browser

WIDTH = 1360
MAX_HEIGHT = 1500


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.browser.screenshots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args(argv)
    missing = missing_browser()
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    from selenium.webdriver.support.ui import WebDriverWait

    with example_extender() as extender, chromium(WIDTH, 900) as driver:
        waiting_uid = next(p.uid for p in extender.service.cache.pods.values() if p.name == WAITING)
        views = {
            "cluster": "/ui/cluster",
            "queues": "/ui/queues",
            "groups": "/ui/groups",
            "decisions": "/ui/decisions",
            "explain": f"/ui/explain?pod={waiting_uid}",
            "health": "/ui/health",
        }
        for view, path in views.items():
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            driver.get(extender.url + path)
            WebDriverWait(driver, 15).until(lambda d: d.execute_script("return document.readyState === 'complete'"))
            # The viewport exactly as tall as the page (window sizes include the browser's frame).
            height = min(MAX_HEIGHT, int(driver.execute_script("return document.documentElement.scrollHeight")))
            metrics = {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False}
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
            target = args.out / f"console-{view}.png"
            driver.save_screenshot(str(target))
            print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
