"""Size and first paint of an explorer page (``explorer.html``, oodcorr.jobs.figures.explorer) in headless
Chromium (issue 38: at most 20 MB and 3 s at the whole Pythia suite, 2,016 pairs x 16 models).

Opens the page from its ``file://`` URL ``--reps`` times, each in a fresh page of Debian's Chromium
driven by Playwright, and records the browser's first contentful paint and the time from navigation
start to the heatmap drawn (the page's own ``performance.now()`` when its script has drawn it), the
wall time of ``goto`` until the page says it is ready, and every request that is not the page itself
(there should be none):

    .venv/bin/python benchmarks/explorer_page.py results/suite/explorer.html --out benchmarks/latest/explorer_page.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    url = args.page.resolve().as_uri()
    res = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "page": str(args.page), "bytes": args.page.stat().st_size}
    res["runs"] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        for rep in range(args.reps):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            requests, errors = [], []
            page.on("request", lambda r, requests=requests: requests.append(r.url))
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            load = os.getloadavg()[0]
            t = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']")
            wall = time.perf_counter() - t
            paint = page.evaluate("performance.getEntriesByName('first-contentful-paint').map(e => e.startTime)")
            got = {
                "rep": rep,
                "first_contentful_paint_ms": round(paint[0]) if paint else None,
                "heatmap_drawn_ms": round(page.evaluate("window.oodcorrExplorer.drawnMs")),
                "ready_wall_s": round(wall, 2),
                "cells": page.evaluate("window.oodcorrExplorer.shown()"),
                "requests_elsewhere": [u for u in requests if u != url],
                "errors": errors,
                "load": round(load, 2),
            }
            res["runs"].append(got)
            print(got, flush=True)
            page.close()
        browser.close()
    print(f"{res['bytes'] / 2**20:.1f} MB; heatmap drawn in {[r['heatmap_drawn_ms'] for r in res['runs']]} ms")
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
