"""Memory a held browser page costs: the resident memory of the Chromium process tree with N pages open.

    .venv/bin/python bench/browser_memory.py [--pages 1,2,4,8] [--single-process]

Opens N conversations' pages in one `LocalBrowserPool` (each its own context, as the tools use them), each on a
realistic page (a few hundred elements of text and controls, served on loopback), and sums the RSS and the PSS
(proportional set size: shared pages split between the processes sharing them, so the sum is not inflated by
the shared Chromium binary) of every process under this one after it. The per-page figure is the slope between
the smallest and largest N. `--single-process` measures with the flags the browser Lambda runs under (one page
per host there, so only N=1 means anything).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "core"))

from oberik.browser import local
from oberik.browser.host import LAMBDA_CHROMIUM_ARGS

PAGE = (
    "<!doctype html><title>Catalogue</title><h1>Catalogue</h1>"
    + "".join(
        f"<div class=item><h3>Item {i}</h3><p>{'Some descriptive text about this item. ' * 8}</p>"
        f"<a href='/item/{i}'>Details</a> <button>Add to cart</button> <input placeholder='qty {i}'></div>"
        for i in range(150)
    )
).encode()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except OSError:
            continue
    return out


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _mem(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def chromium_memory() -> tuple[int, int, int]:
    procs = [p for p in _tree(os.getpid()) if "chrom" in Path(f"/proc/{p}/exe").resolve().name]
    rss = pss = 0
    for p in procs:
        r, s = _mem(p)
        rss += r
        pss += s
    return len(procs), rss, pss


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", default="1,2,4,8")
    parser.add_argument("--single-process", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.pages.split(",")]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    if args.single_process:
        local.CHROMIUM_ARGS = LAMBDA_CHROMIUM_ARGS  # type: ignore[misc]
    print(f"{'pages':>5} {'procs':>5} {'RSS MiB':>8} {'PSS MiB':>8}")
    rows = []
    for n in counts:
        pool = local.LocalBrowserPool(allow_private=True, max_pages=max(counts))
        try:

            async def go(page, url=url):
                await page.goto(url)

            for i in range(n):
                pool.submit(f"bench-{i}", go)
            time.sleep(1.0)  # let renderers finish layout and settle before reading their memory
            procs, rss, pss = chromium_memory()
            rows.append((n, rss, pss))
            print(f"{n:>5} {procs:>5} {rss / 1024:>8.0f} {pss / 1024:>8.0f}")
        finally:
            pool.stop()
    if len(rows) > 1:
        (n0, r0, p0), (n1, r1, p1) = rows[0], rows[-1]
        print(f"per extra page: RSS {(r1 - r0) / (n1 - n0) / 1024:.0f} MiB, PSS {(p1 - p0) / (n1 - n0) / 1024:.0f} MiB")
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
