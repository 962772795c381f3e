"""The recording proxy's cost: latency it adds per call, and calls per second it sustains.

The upstream is a canned vLLM-shaped server on 127.0.0.1 (tests/fakes/openai_server.py,
in its own process) answering at once, so its time is known: the same calls are sent to it
directly and through the proxy, and the difference is what the proxy adds (authenticate,
parse, forward, record the call, strip, answer). The proxy is served as in production:
gunicorn, one gthread worker, DEBUG off, against the configured database (SQLite in a
temporary HARNESS_DATA_DIR unless DATABASE_URL is set).

    .venv/bin/python bench/bench_proxy.py [--calls 300] [--prompt-chars 8000]
        [--threads 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("HARNESS_DATA_DIR", tempfile.mkdtemp(prefix="bench-proxy-"))
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ["DEBUG"] = "0"  # as served: DEBUG keeps every query's SQL text


def setup() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_gunicorn(threads: int, upstream_url: str) -> tuple[subprocess.Popen[bytes], str]:
    """The app under gunicorn's gthread worker, as docker/entrypoint.sh runs it."""

    port = free_port()
    # The per-key limits off: this measures what one key's calls cost, at full rate.
    env = {
        **os.environ,
        "PROXY_UPSTREAM_URL": upstream_url,
        "PROXY_MAX_CONCURRENT_CALLS_PER_KEY": "0",
        "PROXY_MAX_CALLS_PER_MINUTE_PER_KEY": "0",
    }
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "config.wsgi:application",
            f"--bind=127.0.0.1:{port}",
            "--workers=1",
            "--worker-class=gthread",
            f"--threads={threads}",
            "--log-level=warning",
        ],
        cwd=ROOT,
        env=env,
    )
    return server, wait_until_serving(server, port)


def wait_until_serving(server: subprocess.Popen[bytes], port: int) -> str:
    """The server's base URL once /healthz answers; exits if it dies or takes a minute."""
    import httpx

    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while server.poll() is None and time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/healthz", timeout=1)
            return base
        except httpx.HTTPError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit(f"the server did not start (exit status {server.wait()}); see above")


def _upstream_process(conn: Any) -> None:
    from tests.fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer(keep_requests=False) as upstream:
        conn.send(upstream.base_url)
        conn.recv()  # until the bench is done


def start_upstream() -> tuple[Any, Any, str]:
    """The fake upstream in its own process, so it never waits on this one's GIL."""
    import multiprocessing

    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_upstream_process, args=(theirs,))
    process.start()
    return process, ours, ours.recv()


def conversation(prompt_chars: int, turn: int) -> list[dict[str, str]]:
    sentence = "The search returned three documents about the river. "
    filler = (sentence * (prompt_chars // len(sentence) + 1))[:prompt_chars]
    return [
        {"role": "system", "content": "You are a research agent with tools."},
        {"role": "user", "content": filler},
        {"role": "user", "content": f"turn {turn}"},
    ]


API_PATHS = {"chat": "chat/completions", "messages": "messages", "responses": "responses"}


def agent_body(api: str, prompt_chars: int, turn: int, stream: bool) -> dict[str, Any]:
    """The body an agent speaking `api` sends: the same conversation in each API's shape."""
    system, *rest = conversation(prompt_chars, turn)
    if api == "messages":
        return {
            "model": "bench",
            "max_tokens": 64,
            "system": [{"type": "text", "text": system["content"]}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": m["content"]}]} for m in rest
            ],
            "stream": stream,
        }
    if api == "responses":
        return {
            "model": "bench",
            "instructions": system["content"],
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": m["content"]}],
                }
                for m in rest
            ],
            "store": False,
            "stream": stream,
        }
    return {"model": "bench", "messages": [system, *rest], "stream": stream}


def forwarded_body(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the proxy sends upstream for `body`: translated to chat, token capture added."""
    from harness_app.wire.chat import upstream_request
    from harness_app.wire.messages.request import chat_request_from_messages
    from harness_app.wire.responses.request import chat_request_from_responses

    translate = {"messages": chat_request_from_messages, "responses": chat_request_from_responses}
    chat = translate[api](body) if api in translate else body
    return upstream_request(chat)[0]


def timed_call(
    client: Any,
    url: str,
    prompt_chars: int,
    stream: bool,
    turn: int,
    *,
    api: str = "chat",
    as_forwarded: bool = False,
) -> tuple[float, float, float]:
    """One call's whole time, time to its first whole event and to its first byte, in ms.
    `as_forwarded` sends the body the proxy would forward (translated, token capture
    added), which is what the upstream serves for a proxied call."""
    body = agent_body(api, prompt_chars, turn, stream)
    if as_forwarded:
        body = forwarded_body(api, body)
    started = time.perf_counter()
    first = 0.0
    if stream:
        # The first whole event as well as the first byte (the headers, which httpx has
        # when stream() returns): the fake upstream sends its headers before it has built
        # any event, so the first byte alone would flatter the direct call.
        seen = b""
        with client.stream("POST", url, json=body) as response:
            headers_at = time.perf_counter()
            for piece in response.iter_raw():
                if not first:
                    seen += piece
                    if b"\n\n" in seen:
                        first = time.perf_counter()
    else:
        response = client.post(url, json=body)
        headers_at = 0.0
    done = time.perf_counter()
    assert response.status_code == 200, response.text
    ms = [(at - started) * 1000 for at in (done, first or done, headers_at or done)]
    return ms[0], ms[1], ms[2]


def timed_calls(
    client: Any,
    urls: dict[str, tuple[str, bool]],
    n: int,
    prompt_chars: int,
    stream: bool,
    api: str,
) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """n calls to each of `urls` (name → (url, send the forwarded body)), taken in turn so
    that a change in the machine's load falls on all of them alike."""
    times: dict[str, tuple[list[float], list[float], list[float]]] = {
        name: ([], [], []) for name in urls
    }
    for i in range(n):
        for name, (url, as_forwarded) in urls.items():
            measured = timed_call(
                client, url, prompt_chars, stream, i, api=api, as_forwarded=as_forwarded
            )
            for series, value in zip(times[name], measured, strict=True):
                series.append(value)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def sustained(base: str, threads: int, seconds: float, prompt_chars: int) -> tuple[int, float]:
    import httpx

    done = [0] * threads
    stop = time.perf_counter() + seconds

    def worker(slot: int) -> None:
        with httpx.Client(timeout=30) as client:
            while time.perf_counter() < stop:
                body = {"model": "bench", "messages": conversation(prompt_chars, slot)}
                assert client.post(base, json=body).status_code == 200
                done[slot] += 1

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(done), time.perf_counter() - started


def bench_one(
    client: Any, api: str, url: str, direct_url: str, stream: bool, args: argparse.Namespace
) -> None:
    urls = {"proxied": (url, False), "forwarded": (direct_url, True)}
    if api == "chat":
        urls["agent"] = (direct_url, False)
    timed_calls(client, urls, 20, args.prompt_chars, stream, api)  # warm up
    times = timed_calls(client, urls, args.calls, args.prompt_chars, stream, api)
    proxied, proxied_first, proxied_byte = times["proxied"]
    forwarded, forwarded_first, forwarded_byte = times["forwarded"]
    p50, base = statistics.median(proxied), statistics.median(forwarded)
    line = (
        f"{api:9s} {'streamed' if stream else 'whole':8s} forwarded {base:5.2f} · proxied "
        f"{p50:5.2f} (p99 {percentile(proxied, 0.99):5.2f}) · proxy work {p50 - base:5.2f}"
    )
    if "agent" in times:
        line += f" · agent sees {p50 - statistics.median(times['agent'][0]):5.2f}"
    if stream:
        added = statistics.median(proxied_first) - statistics.median(forwarded_first)
        byte = statistics.median(proxied_byte) - statistics.median(forwarded_byte)
        line += f" · first event +{added:4.2f} · first byte +{byte:4.2f}"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--prompt-chars", type=int, default=8000, help="≈ prompt tokens")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--api", nargs="+", choices=sorted(API_PATHS), default=["chat", "messages", "responses"]
    )
    args = parser.parse_args()
    setup()
    import httpx
    from django.db import connection

    from trajectories.models import ModelCall
    from trajectories.services.recording import recording_session_create

    process, pipe, upstream_url = start_upstream()
    server, base = serve_gunicorn(args.threads, upstream_url)
    try:
        session, key = recording_session_create(user=None, name="bench")
        proxy_url = f"{base}/proxy/{key}/v1/chat/completions"
        direct_url = f"{upstream_url}/chat/completions"
        print(f"database {connection.vendor}; prompt ≈ {args.prompt_chars} tokens per call")
        print(
            "p50 in ms. 'proxy work' = proxied - the upstream serving the forwarded body "
            "(token capture\nadded): what the proxy itself adds. 'agent sees' = proxied - the "
            "agent's own body\nsent directly: that plus the upstream's cost of returning "
            "token ids and logprobs."
        )
        with httpx.Client(timeout=30) as client:
            for api in args.api:
                url = f"{base}/proxy/{key}/v1/{API_PATHS[api]}"
                for stream in (False, True):
                    bench_one(client, api, url, direct_url, stream, args)
        calls, elapsed = sustained(proxy_url, args.threads, args.seconds, args.prompt_chars)
        print(
            f"sustained: {calls} calls in {elapsed:.1f} s with {args.threads} client threads "
            f"= {calls / elapsed:.0f} calls/s"
        )
        recorded = ModelCall.objects.filter(episode=session.episode).count()
        print(f"recorded calls: {recorded}")
    finally:
        server.terminate()
        server.wait(timeout=30)
        pipe.send("stop")
        process.join(timeout=10)


if __name__ == "__main__":
    main()
