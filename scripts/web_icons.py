#!/usr/bin/env python3
"""Draws the web client's raster icons from app/web/favicon.svg with Debian's Chromium.

Writes app/web/favicon.ico (16, 32 and 48 px PNG images in one ICO file) and
app/web/apple-touch-icon.png (180 px). Run it after changing favicon.svg:

    .venv/bin/python scripts/web_icons.py
"""

from __future__ import annotations

import base64
import os
import struct
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "app" / "web"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ICO_SIZES = (16, 32, 48)
TOUCH_SIZE = 180


def ico(images: dict[int, bytes]) -> bytes:
    """An ICO file holding PNG images (supported by every browser since Windows Vista's format)."""
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = len(header) + 16 * len(images)
    entries, payload = b"", b""
    for size, png in images.items():
        entries += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(png), offset)
        payload += png
        offset += len(png)
    return header + entries + payload


def main() -> None:
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    svg = base64.b64encode((WEB / "favicon.svg").read_bytes()).decode()
    pngs: dict[int, bytes] = {}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for size in (*ICO_SIZES, TOUCH_SIZE):
            page = browser.new_page(viewport={"width": size, "height": size})
            page.set_content(
                f'<body style="margin:0"><img src="data:image/svg+xml;base64,{svg}" '
                f'width="{size}" height="{size}" style="display:block"></body>'
            )
            page.wait_for_function("document.images[0].complete")
            pngs[size] = page.screenshot(omit_background=True)
            page.close()
        browser.close()
    (WEB / "favicon.ico").write_bytes(ico({size: pngs[size] for size in ICO_SIZES}))
    (WEB / "apple-touch-icon.png").write_bytes(pngs[TOUCH_SIZE])
    print(f"wrote {WEB / 'favicon.ico'} and {WEB / 'apple-touch-icon.png'}")


if __name__ == "__main__":
    main()
