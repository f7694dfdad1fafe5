"""Streaming benchmark: the platform against the model provider it streams from, measured side by side.

    make bench                      # or: .venv/bin/python bench/streaming.py [--runs N] [--quick]

Everything runs in this process: the embedded stack (`LocalStack.server()`, moto on loopback), the real API
(`create_app()` under uvicorn in a thread) and a `ScriptedProvider`. A project is created and pointed at the
provider over HTTP, as any client would, and a token is minted for it. Then:

1. time to first token: the `openai` client straight from the provider (the baseline) against
   `POST /chat/stream` (first `token` frame), interleaved, same scripted reply;
2. per-token delivery lag: when each token frame reached the client minus when the provider wrote the last
   chunk that frame contains (both `time.perf_counter()` in this process);
3. replay of a finished 5,000-frame run with `GET /chat/stream/{run_id}` and `Last-Event-ID: 0`;
4. 20 concurrent streaming turns: no frame lost or duplicated, and the lag under that load (reported only:
   there is no target for lag under load).

These machines are small and noisy (2 cores), so figures are ratios against a baseline measured in the same
run, never absolute promises. Exit status: 0 when every correctness check held (whether or not the speed
targets were met: this is a measurement), 1 when a frame was lost, duplicated or out of order.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import socket
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The turn handlers log one INFO line per turn to stdout; keep the report readable. Must precede oberik imports.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
# Every routed Lambda flushes its (empty, disabled) metrics with a warning; `oberik dev` prints it once too.
warnings.filterwarnings("ignore", message="No application metrics to publish")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "core"))

import httpx  # noqa: E402
import openai  # noqa: E402

from oberik.local.scripted_provider import Reply, ScriptedProvider  # noqa: E402

TTFT = 0.3  # the provider's time to first token, seconds
TOKEN_DELAY = 0.010  # between later tokens
TOKENS = 50
REPLAY_FRAMES = 5000

TTFT_TARGET = 1.15  # platform p50 / provider p50
LAG_TARGET_MS = 150.0  # p99
REPLAY_TARGET_S = 1.0
TERMINAL = {"done", "cancelled", "error"}


# --------------------------------------------------------------------------------------------- small helpers


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def reply_text(tag: str) -> str:
    """About TOKENS word tokens, distinct per tag so a frame can only match the reply it came from."""
    return " ".join(f"{tag}w{i}" for i in range(TOKENS))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Frame:
    id: int | None
    event: str
    data: dict[str, Any]
    at: float  # perf_counter when the bytes completing it arrived


def sse_frames(response: httpx.Response) -> Iterator[Frame]:
    """Frames of a streaming SSE response as they arrive, each stamped with its arrival time."""
    buffer = b""
    for chunk in response.iter_raw():
        at = time.perf_counter()
        buffer += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            fields: dict[str, str] = {}
            for line in block.decode().split("\n"):
                if line and not line.startswith(":") and ":" in line:
                    key, _, value = line.partition(":")
                    fields[key] = value.lstrip(" ")
            if "event" in fields:
                seq = int(fields["id"]) if "id" in fields else None
                yield Frame(seq, fields["event"], json.loads(fields.get("data") or "{}"), at)


@dataclass
class StreamResult:
    marker: str
    started: float
    status: int = 0
    run_id: str = ""
    frames: list[Frame] = field(default_factory=list)
    error: str | None = None

    @property
    def first_token_at(self) -> float | None:
        return next((f.at for f in self.frames if f.event == "token"), None)

    @property
    def text(self) -> str:
        return "".join(str(f.data.get("delta", "")) for f in self.frames if f.event == "token")


# --------------------------------------------------------------------------------------------- the rig


class Rig:
    """The embedded stack, the API under uvicorn and the scripted provider, with a project and a token."""

    def __init__(self) -> None:
        from oberik.local.stack import LocalStack

        self.provider = ScriptedProvider(model_ids=("bench",)).start()
        self.stack = LocalStack.server()
        self._previous_admin_key = os.environ.get("OBERIK_ADMIN_KEY")
        self.server: Any = None
        try:
            self._start_api()
        except BaseException:
            self.close()
            raise

    def _start_api(self) -> None:
        from oberik.settings import get_settings

        admin_key = secrets.token_urlsafe(32)
        os.environ["OBERIK_ADMIN_KEY"] = admin_key
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
            os.environ.pop(name, None)
        get_settings.cache_clear()

        import uvicorn

        from oberik.api.app import create_app

        port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.token = self._bootstrap(admin_key)
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def _bootstrap(self, admin_key: str) -> str:
        created = self.http.post("/api/projects", headers={"X-Admin-Key": admin_key}, json={"name": "bench"})
        if created.status_code != 201:
            raise RuntimeError(f"creating the project failed: {created.status_code}")
        project = created.json()
        self.project_id = project["id"]
        key = {"X-API-Key": project["key"]}
        configured = self.http.patch(
            f"/api/projects/{project['id']}/settings",
            headers=key,
            json={
                "providers": {"scripted": {"base_url": self.provider.base_url, "api_key": "x"}},
                "default_model": "scripted/bench",
            },
        )
        if configured.status_code != 200:
            raise RuntimeError(f"configuring the project failed: {configured.status_code}")
        minted = self.http.post(
            f"/api/projects/{project['id']}/tokens", headers=key, json={"subject": "bench", "ttl": 3600}
        )
        if minted.status_code != 201:
            raise RuntimeError(f"minting a token failed: {minted.status_code}")
        return str(minted.json()["token"])

    def close(self) -> None:
        from oberik.settings import get_settings

        if self.server is not None:
            if hasattr(self, "http"):
                self.http.close()
            self.server.should_exit = True
            self.thread.join(timeout=10)
        self.stack.stop()
        self.provider.stop()
        if self._previous_admin_key is None:
            os.environ.pop("OBERIK_ADMIN_KEY", None)
        else:
            os.environ["OBERIK_ADMIN_KEY"] = self._previous_admin_key
        get_settings.cache_clear()

    # -- one platform stream -----------------------------------------------------------------------------

    def stream_turn(self, marker: str, http: httpx.Client | None = None) -> StreamResult:
        """POST /chat/stream with a message carrying `marker`, reading every frame until the stream ends."""
        client = http or self.http
        result = StreamResult(marker, time.perf_counter())
        try:
            with client.stream("POST", "/chat/stream", json={"message": marker}, headers=self.auth) as r:
                result.status = r.status_code
                result.run_id = r.headers.get("X-Run-Id", "")
                if r.status_code != 200:
                    r.read()
                    result.error = f"HTTP {r.status_code}"
                    return result
                for frame in sse_frames(r):
                    result.frames.append(frame)
        except httpx.HTTPError as exc:
            result.error = repr(exc)
        return result

    # -- the provider's side -----------------------------------------------------------------------------

    def request_index(self, marker: str) -> int | None:
        """Which provider request carried `marker` (the platform forwards the user's message)."""
        for index, body in enumerate(self.provider.requests):
            if marker in json.dumps(body.get("messages", [])):
                return index
        return None

    def emitted(self, index: int) -> list[tuple[str, float]]:
        """(text, emit time) of every chunk the provider wrote for request `index`, in order."""
        chunks = sorted((c, text, at) for i, c, text, at in self.provider.emit_log if i == index)
        return [(text, at) for _, text, at in chunks]


def frame_lags(result: StreamResult, emitted: list[tuple[str, float]]) -> list[float]:
    """Arrival minus provider emit time of the chunk holding each token frame's last character.

    A frame usually ends where a chunk ends, but not always: trailing white space is held back until the next
    chunk shows whether a citation marker follows, so a frame may end inside the chunk that brought it.
    """
    import bisect

    starts: list[int] = []
    times: list[float] = []
    position = 0
    for text, at in emitted:
        starts.append(position)
        times.append(at)
        position += len(text)
    lags: list[float] = []
    position = 0
    for frame in result.frames:
        if frame.event != "token":
            continue
        delta = str(frame.data.get("delta", ""))
        if not delta:
            continue
        position += len(delta)
        index = bisect.bisect_right(starts, position - 1) - 1
        if 0 <= index < len(times):
            lags.append(frame.at - times[index])
    return lags


def integrity_problems(result: StreamResult, expected_text: str) -> list[str]:
    """Everything wrong with a finished stream: lost, repeated or reordered frames, wrong text, bad ending."""
    problems: list[str] = []
    if result.error:
        return [f"{result.marker}: {result.error}"]
    ids = [f.id for f in result.frames]
    if ids != list(range(1, len(ids) + 1)):
        problems.append(f"{result.marker}: frame ids are not 1..{len(ids)} in order: {ids[:8]}...")
    terminals = [f.event for f in result.frames if f.event in TERMINAL]
    if terminals != ["done"] or result.frames[-1].event != "done":
        problems.append(f"{result.marker}: terminal frames {terminals}, expected exactly one final done")
    if result.text != expected_text:
        problems.append(f"{result.marker}: token text differs from what the provider sent")
    elif result.frames and result.frames[-1].data.get("content") != expected_text:
        problems.append(f"{result.marker}: the done frame's content differs from the streamed text")
    return problems


# --------------------------------------------------------------------------------------------- the figures


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    checks: int = 0
    met: int = 0
    broken: list[str] = field(default_factory=list)  # correctness failures

    def figure(self, line: str, ok: bool) -> None:
        self.checks += 1
        self.met += ok
        self.say(f"{line}  [{'ok' if ok else 'MISSED'}]")

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)


def bench_ttft(rig: Rig, runs: int, report: Report) -> None:
    text = reply_text("t")
    client = openai.OpenAI(base_url=rig.provider.base_url, api_key="x", max_retries=0, timeout=60)

    def direct() -> float:
        """The baseline: what an app calling the provider itself would see, with the same `openai` client."""
        rig.provider.script(Reply(text=text, ttft=TTFT, token_delay=TOKEN_DELAY))
        started = time.perf_counter()
        first: float | None = None
        stream = client.chat.completions.create(
            model="bench", messages=[{"role": "user", "content": "baseline"}], stream=True
        )
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
        if first is None:
            raise AssertionError("the provider sent no content")
        return first - started

    def platform(marker: str) -> StreamResult:
        rig.provider.script(Reply(text=text, ttft=TTFT, token_delay=TOKEN_DELAY))
        return rig.stream_turn(marker)

    # One unmeasured round of each: first connections, lazy imports, botocore's endpoint data.
    direct()
    warm = platform("[bench warmup]")
    report.broken += integrity_problems(warm, text)

    provider_ttft: list[float] = []
    platform_ttft: list[float] = []
    lags: list[float] = []
    before: list[float] = []  # request -> the provider has it (its first chunk's emit time minus its scripted ttft)
    after: list[float] = []  # the provider's first chunk -> the first token frame at the client
    for i in range(runs):
        marker = f"[bench ttft {i:03d}]"
        order = (0, 1) if i % 2 == 0 else (1, 0)  # alternate who goes first, so drift hits both alike
        for which in order:
            if which == 0:
                provider_ttft.append(direct())
                continue
            result = platform(marker)
            problems = integrity_problems(result, text)
            report.broken += problems
            first = result.first_token_at
            if problems or first is None:
                continue
            platform_ttft.append(first - result.started)
            index = rig.request_index(marker)
            if index is None:
                report.broken.append(f"{marker}: the provider never saw this turn")
                continue
            emitted = rig.emitted(index)
            lags += frame_lags(result, emitted)
            before.append(emitted[0][1] - TTFT - result.started)
            after.append(first - emitted[0][1])
    client.close()
    if not platform_ttft:
        report.figure("ttft: no platform run delivered a token", False)
        lag_line(report, "lag", lags, "")
        return
    p50, b50 = statistics.median(platform_ttft), statistics.median(provider_ttft)
    p95, b95 = percentile(platform_ttft, 95), percentile(provider_ttft, 95)
    ratio = p50 / b50
    report.figure(
        f"ttft: platform p50 {ms(p50)} / provider p50 {ms(b50)} = {ratio:.2f}x "
        f"(+{(p50 - b50) * 1000:.0f} ms p50, +{(p95 - b95) * 1000:.0f} ms p95)  target <= {TTFT_TARGET:.2f}x",
        ratio <= TTFT_TARGET,
    )
    report.say(
        f"  (platform p50: {ms(statistics.median(before))} until the provider has the request, "
        f"{ms(TTFT)} provider, {ms(statistics.median(after))} from its first chunk to the client)"
    )
    lag_line(report, "lag", lags, f"{len(lags)} token frames in {len(platform_ttft)} runs")


def lag_line(report: Report, name: str, lags: list[float], what: str, *, target: bool = True) -> None:
    """`target`: held to the lag target; otherwise the figure is reported only (there is no target for the lag
    under 20 concurrent turns, which on this stack share one process and two cores)."""
    if not lags:
        report.figure(f"{name}: no token frames to measure", False)
        return
    p99 = percentile(lags, 99)
    line = f"{name}: p50 {ms(statistics.median(lags))}, p99 {ms(p99)}, max {ms(max(lags))} over {what}"
    if target:
        report.figure(f"{line}  target p99 < {LAG_TARGET_MS:.0f} ms", p99 * 1000 < LAG_TARGET_MS)
    else:
        report.say(f"{line}  (reported; no target under load)")


def bench_replay(rig: Rig, frames: int, report: Report) -> None:
    """Replay a finished run of `frames` frames from the start.

    How the run is built: a real turn (POST /chat/stream, scripted reply) creates and finishes a real run, so
    the run item, its turn, its conversation and its `done` frame are all genuine. Streaming 5,000 chunks
    through the platform would not give 5,000 frames (the frame writer batches ~50 ms / 2 KB) and pacing them
    past the batch window would take minutes, so instead the run's `done` frame is taken out, token frames are
    added up to seq `frames - 1`, and the original `done` frame goes back as the last one. The run stays marked
    ended (completed) by the real Finish task. Every added item is built by `DynamoStore.put_frame` itself (its
    client swapped for a recorder); they are written 25 at a time with BatchWriteItem, because 5,000 single
    PutItem calls cost ~25 s on the local stack.
    """
    from oberik.adapters.aws import client
    from oberik.adapters.dynamodb import DynamoStore, serialize
    from oberik.adapters.keys import frame_key
    from oberik.engine.frames import FRAME_RETENTION_SECONDS

    text = reply_text("r")
    rig.provider.script(Reply(text=text))
    seed = rig.stream_turn("[bench replay]")
    report.broken += integrity_problems(seed, text)
    if seed.error or not seed.frames or seed.frames[-1].id is None:
        report.figure("replay: the seed turn failed", False)
        return
    store = DynamoStore()
    db = client("dynamodb")
    done = seed.frames[-1]
    assert done.id is not None

    class Capture(DynamoStore):
        """A DynamoStore whose client keeps each put_item's item instead of sending it."""

        def __init__(self) -> None:
            super().__init__()
            self.items: list[dict[str, Any]] = []

        @property
        def db(self) -> Any:
            return self

        def put_item(self, **request: Any) -> dict[str, Any]:
            self.items.append(request["Item"])
            return {}

    capture = Capture()
    expires = int(time.time()) + FRAME_RETENTION_SECONDS
    for seq in range(done.id, frames):
        capture.put_frame(seed.run_id, seq, "token", {"delta": f"x{seq} "}, expires_at=expires)
    capture.put_frame(seed.run_id, frames, "done", done.data, expires_at=expires)
    db.delete_item(TableName=store.table, Key=serialize(frame_key(seed.run_id, done.id)))
    for start in range(0, len(capture.items), 25):
        batch = [{"PutRequest": {"Item": item}} for item in capture.items[start : start + 25]]
        db.batch_write_item(RequestItems={store.table: batch})

    items = db.describe_table(TableName=store.table)["Table"]["ItemCount"]
    read_at = time.perf_counter()
    read = len(store.frames_after(seed.run_id, 0, cached=False))
    read_s = time.perf_counter() - read_at

    from oberik.adapters.frame_cache import FRAMES

    def replay(label: str, judged: bool) -> None:
        started = time.perf_counter()
        got: list[Frame] = []
        with rig.http.stream("GET", f"/chat/stream/{seed.run_id}", headers={**rig.auth, "Last-Event-ID": "0"}) as r:
            for frame in sse_frames(r):
                got.append(frame)
                if frame.event in TERMINAL:
                    break
        elapsed = time.perf_counter() - started
        ids = [f.id for f in got]
        if ids != list(range(1, frames + 1)) or not got or got[-1].event != "done" or got[-1].data != done.data:
            report.broken.append(f"{label}: got {len(ids)} frames, not 1..{frames} ending in the run's done frame")
        first_at = got[0].at - started if got else float("nan")
        line = (
            f"{label}: {len(got)} frames in {elapsed:.2f} s = {len(got) / elapsed:,.0f} frames/s "
            f"(first frame after {ms(first_at)})"
        )
        if judged:
            report.figure(f"{line}  target < {REPLAY_TARGET_S:.0f} s", elapsed < REPLAY_TARGET_S)
        else:
            report.say(f"  {line}")

    # The capture above went through put_frame, so this process holds the frames as the run's writer would.
    replay("replay", judged=True)
    # A reader in another process (on AWS: the stream function, not the step that wrote) reads the table.
    FRAMES.forget(seed.run_id)
    replay("replay from the table alone (a reader in another process)", judged=False)
    report.say(
        f"  (reading the log: DynamoStore.frames_after of {read} frames alone took {ms(read_s)}, "
        f"with {items:,} items in the local table)"
    )


def bench_concurrent(rig: Rig, turns: int, report: Report) -> None:
    texts = {f"[bench concurrent {n:02d}]": reply_text(f"c{n:02d}") for n in range(turns)}
    # The provider answers in arrival order; each text is distinct, so the check below finds who got which.
    rig.provider.script(*(Reply(text=t, ttft=TTFT, token_delay=TOKEN_DELAY) for t in texts.values()))
    barrier = threading.Barrier(turns)
    results: dict[str, StreamResult] = {}

    def one(marker: str) -> None:
        with httpx.Client(base_url=rig.url, timeout=60) as http:
            barrier.wait()
            results[marker] = rig.stream_turn(marker, http)

    threads = [threading.Thread(target=one, args=(m,), daemon=True) for m in texts]
    started = time.perf_counter()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    wall = time.perf_counter() - started

    problems: list[str] = []
    lags: list[float] = []
    ttfts: list[float] = []
    frames = 0
    for marker in texts:
        result = results.get(marker)
        if result is None:
            problems.append(f"{marker}: did not finish")
            continue
        index = rig.request_index(marker)
        if index is None:
            problems.append(f"{marker}: the provider never saw this turn")
            continue
        emitted = rig.emitted(index)
        sent = "".join(text for text, _ in emitted)
        if sent not in texts.values():
            problems.append(f"{marker}: the provider's reply was cut short")
        found = integrity_problems(result, sent)
        problems += found
        frames += len(result.frames)
        if not found:
            lags += frame_lags(result, emitted)
            if result.first_token_at is not None:
                ttfts.append(result.first_token_at - result.started)
    report.broken += problems
    report.figure(
        f"concurrent: {turns} turns at once, {frames} frames in {wall:.1f} s, "
        + ("none lost, duplicated or out of order" if not problems else f"{len(problems)} PROBLEMS"),
        not problems,
    )
    lag_line(
        report,
        "concurrent lag",
        lags,
        f"{len(lags)} token frames ({len(lags) / max(1, len(ttfts)):.0f} a turn)",
        target=False,
    )
    if ttfts:
        report.say(f"  (time to first token under this load: p50 {ms(statistics.median(ttfts))}, max {ms(max(ttfts))})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="ttft runs of each side (default 15, quick 5)")
    parser.add_argument("--turns", type=int, default=None, help="concurrent turns (default 20, quick 10)")
    parser.add_argument("--replay-frames", type=int, default=REPLAY_FRAMES, help="frames in the replayed run")
    parser.add_argument("--quick", action="store_true", help="a smaller run (a smoke test, not a measurement)")
    args = parser.parse_args(argv)
    runs = max(1, args.runs or (5 if args.quick else 15))
    turns = max(1, args.turns or (10 if args.quick else 20))

    began = time.perf_counter()
    print(
        f"bench: streaming on {os.cpu_count()} cores; provider ttft {TTFT * 1000:.0f} ms, "
        f"{TOKENS} tokens every {TOKEN_DELAY * 1000:.0f} ms; {runs} runs each, {turns} concurrent turns",
        flush=True,
    )
    report = Report()
    rig = Rig()
    try:
        bench_ttft(rig, runs, report)
        bench_concurrent(rig, turns, report)
        bench_replay(rig, args.replay_frames, report)
    finally:
        rig.close()
    for problem in report.broken:
        print(f"  correctness: {problem}", flush=True)
    print(f"bench: ran in {time.perf_counter() - began:.0f} s", flush=True)
    print(f"bench: {report.checks} checks, {report.met} within target", flush=True)
    return 1 if report.broken else 0


if __name__ == "__main__":
    sys.exit(main())
