#!/usr/bin/env python3
"""Render a pytest-jaxport report as HTML and take a full-page screenshot in headless Chromium.

    python scripts/screenshot_report.py REPORT.json OUT.png [--width 1280] [--html OUT.html]
        [--max-height PX] [--at SELECTOR]
    python scripts/screenshot_report.py --first-screen PAGE.html SELECTOR...

A person can then look at the PNG. ``--first-screen`` prints, as JSON, the page's load time,
its height and where each selector's element starts (a 1280x800 window).

It drives Chromium through the DevTools protocol over a pipe (``--remote-debugging-pipe``:
no port, no network), so the screenshot covers the whole page, and it exits non-zero when
the page logged a console error or threw, printing them.

Chromium: Debian's ``chromium`` package (``apt-get install -y --no-install-recommends
chromium``), or set ``$CHROMIUM`` to a binary.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
)


def find_chromium() -> str | None:
    """``$CHROMIUM``, else the first of chromium / chromium-browser / google-chrome on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevTools:
    """A minimal DevTools-protocol client over ``--remote-debugging-pipe`` (fds 3 and 4)."""

    def __init__(self, chromium: str, profile: Path, timeout: float) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # runs in the child before exec: the pipe ends become fds 3 and 4
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=wire,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._deadline = time.monotonic() + timeout
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str) -> dict[str, Any]:
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message()
            if event.get("method") == method:
                return event
            self.events.append(event)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


@contextlib.contextmanager
def _page(
    width: int, height: int, timeout: float, domains: tuple[str, ...]
) -> Iterator[tuple[DevTools, str]]:
    """A headless Chromium with one blank page of ``width`` x ``height`` CSS px: the DevTools
    client and the page's session, the ``domains`` enabled."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium found (apt-get install -y chromium, or $CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="jaxport-chromium-") as profile:
        browser = DevTools(chromium, Path(profile), timeout)
        try:
            target = browser.call("Target.createTarget", url="about:blank")["targetId"]
            session = browser.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            for domain in domains:
                browser.call(f"{domain}.enable", session)
            browser.call(
                "Emulation.setDeviceMetricsOverride",
                session,
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            yield browser, session
        finally:
            browser.close()


def console_problems(events: list[dict[str, Any]]) -> list[str]:
    """Console errors and warnings, uncaught exceptions and error log entries."""
    problems = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            problems.append(f"uncaught: {details.get('text')} {details.get('exception', {})}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning"):
            args = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            problems.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") in ("error", "warning"):
                problems.append(f"log {entry.get('level')}: {entry.get('text')}")
    return problems


def screenshot(
    html_path: Path,
    png_path: Path,
    *,
    width: int = 1280,
    max_height: int | None = None,
    at: str | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Load ``html_path``, save a full-page PNG to ``png_path``; return console problems.

    ``max_height`` cuts the page at that many CSS pixels (the top of a long report); ``at``
    (a CSS selector) starts the picture at that element instead of the top of the page.
    """
    with _page(width, 800, timeout, ("Page", "Runtime", "Log")) as (browser, session):
        browser.call("Page.navigate", session, url=html_path.resolve().as_uri())
        browser.wait_for("Page.loadEventFired")
        size = browser.call("Page.getLayoutMetrics", session)["cssContentSize"]
        top = 0
        if at is not None:
            found = browser.call(
                "Runtime.evaluate",
                session,
                expression=f"document.querySelector({json.dumps(at)})"
                ".getBoundingClientRect().top + window.scrollY",
                returnByValue=True,
            )
            top = int(found["result"].get("value") or 0)
        height = int(size["height"]) + 1 - top
        if max_height:
            height = min(height, max_height)
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height + top,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = browser.call(
            "Page.captureScreenshot",
            session,
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": top, "width": width, "height": height, "scale": 1},
        )
        png_path.write_bytes(base64.b64decode(shot["data"]))
        return console_problems(browser.events)


def first_screen(
    html_path: Path,
    selectors: list[str],
    *,
    width: int = 1280,
    height: int = 800,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Load ``html_path`` in a ``width`` x ``height`` window: the load time (navigation to the
    load event, ms), the page height, and each selector's top edge in CSS px (``None`` when
    absent), to tell what a person sees without scrolling."""
    with _page(width, height, timeout, ("Page", "Runtime")) as (browser, session):
        started = time.monotonic()
        browser.call("Page.navigate", session, url=html_path.resolve().as_uri())
        browser.wait_for("Page.loadEventFired")
        load_ms = (time.monotonic() - started) * 1000
        # DevTools evaluates outside the page's Content-Security-Policy (no page script).
        expression = (
            "JSON.stringify({height: document.documentElement.scrollHeight, tops: "
            + json.dumps(selectors)
            + ".map(s => { const e = document.querySelector(s); "
            "return e ? e.getBoundingClientRect().top : null; })})"
        )
        found = browser.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        measured = json.loads(found["result"]["value"])
        return {
            "load_ms": round(load_ms, 1),
            "page_height": measured["height"],
            "tops": dict(zip(selectors, measured["tops"], strict=True)),
            "problems": console_problems(browser.events),
        }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--first-screen"]:
        # --first-screen PAGE.html SELECTOR...: what the first screen shows, as JSON
        print(json.dumps(first_screen(Path(argv[1]), argv[2:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a pytest-jaxport JSON report")
    parser.add_argument("png", type=Path, help="where to write the screenshot")
    parser.add_argument("--width", type=int, default=1280, help="viewport width in CSS px")
    parser.add_argument(
        "--max-height", type=int, help="cut the page at this many CSS px (default: whole page)"
    )
    parser.add_argument("--html", type=Path, help="also keep the rendered HTML here")
    parser.add_argument("--at", help="start the picture at this CSS selector's element")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pytest_jaxport.report.errors import ReportError
    from pytest_jaxport.report.files import load
    from pytest_jaxport.view.html import html

    try:
        report = load(args.report)
    except ReportError as e:
        print(f"screenshot_report: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="jaxport-html-") as tmp:
        html_path = args.html or Path(tmp) / "report.html"
        html_path.write_text(html(report), encoding="utf-8")
        try:
            problems = screenshot(
                html_path, args.png, width=args.width, max_height=args.max_height, at=args.at
            )
        except (FileNotFoundError, TimeoutError, RuntimeError) as e:
            print(f"screenshot_report: {e}", file=sys.stderr)
            return 2
    for problem in problems:
        print(f"screenshot_report: {problem}", file=sys.stderr)
    print(f"screenshot_report: wrote {args.png} ({args.png.stat().st_size} bytes)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
