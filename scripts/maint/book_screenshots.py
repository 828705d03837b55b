"""Screenshots of the built course book for docs/: a lock map (the clickable copy and the same
map drawn by Mermaid), the read-aloud control and the in-browser TypeScript sandbox after one
release. Taken in Debian's Chromium through Playwright, from the pages on disk.

    ./lab.sh book notebooks/00_start_here.ipynb notebooks/sandbox.ipynb
    .venv/bin/python scripts/maint/book_screenshots.py            # book/_build/html -> docs/book_*.png

Each file is checked to stay under MAX_BYTES (docs/ is read on GitHub, not a photo album).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MAX_BYTES = 150_000


def take(book: Path, docs: Path) -> list[Path]:
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 800})
        page.goto((book / "index.html").as_uri())
        page.wait_for_function("[...document.querySelectorAll('pre.mermaid')].every(p => p.querySelector('svg'))",
                               timeout=30000)
        shots.append(docs / "book_map.png")
        page.locator(".output.map").nth(1).screenshot(path=str(shots[-1]))
        shots.append(docs / "book_read_aloud.png")
        page.locator(".labkit-read-aloud").first.screenshot(path=str(shots[-1]))
        page.goto((book / "sandbox.html").as_uri())
        widget = page.locator("[id^=labkit-sandbox-]").first
        widget.locator(".sandbox-release").click()
        shots.append(docs / "book_sandbox.png")
        widget.screenshot(path=str(shots[-1]))
        browser.close()
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("book", nargs="?", type=Path, default=ROOT / "book" / "_build" / "html")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    if not (args.book / "index.html").exists() or not (args.book / "sandbox.html").exists():
        print(f"no book with 00 and the sandbox in {args.book}: ./lab.sh book notebooks/00_start_here.ipynb "
              "notebooks/sandbox.ipynb first", file=sys.stderr)
        return 1
    too_big = []
    for shot in take(args.book, args.docs):
        size = shot.stat().st_size
        print(f"{shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot}: {size // 1000} kB")
        too_big += [shot.name] if size > MAX_BYTES else []
    if too_big:
        print(f"larger than {MAX_BYTES // 1000} kB: {', '.join(too_big)}", file=sys.stderr)
    return 1 if too_big else 0


if __name__ == "__main__":
    sys.exit(main())
