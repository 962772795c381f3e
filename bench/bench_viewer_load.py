"""The episode viewer's first load in Chromium, as served in production.

The demo is seeded (`setup_demo`, its episodes played here rather than by a worker) in a
temporary HARNESS_DATA_DIR, collected with `collectstatic`, and served by gunicorn with
DEPLOYMENT=production (DEBUG off, WhiteNoise, hashed gzipped static files). Chromium logs in
once; each cold load then opens a fresh browser context (empty cache, the session cookie
only) and each warm load navigates again in that context. Printed per load: milliseconds
from navigation start to the load event, and to both plots (evidence graph, recall chart)
drawn. `--dev` serves `runserver` with DEBUG on instead, as `make run` does, for comparison.

    .venv/bin/python bench/bench_viewer_load.py [--loads 5] [--dev]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("HARNESS_DATA_DIR", tempfile.mkdtemp(prefix="bench-viewer-"))
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ["STATIC_MANIFEST"] = "1"  # collectstatic writes the hashed, gzipped copies

from bench.bench_proxy import free_port, wait_until_serving  # noqa: E402

USERNAME, PASSWORD = "researcher", "harness-demo"  # setup_demo's login
PLOTS_DRAWN = (
    "document.querySelector('#graph-plot .main-svg')"
    " && document.querySelector('#recall-plot .main-svg')"
)


def seed() -> int:
    """The demo, every episode played, static files collected; the id of an episode with
    the most turns, so the viewer has the most to draw."""
    import django

    django.setup()
    from django.core.management import call_command

    from trajectories.models import Episode
    from trajectories.rollout import episode_run

    call_command("migrate", verbosity=0)
    call_command("setup_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    for episode_id in Episode.objects.filter(turns=0).values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    call_command("collectstatic", interactive=False, verbosity=0)
    return int(Episode.objects.order_by("-turns", "pk").values_list("pk", flat=True)[0])


def serve(dev: bool) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    if dev:
        env = {**os.environ, "DEBUG": "1", "STATIC_MANIFEST": "0"}
        command = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    else:
        env = {
            **os.environ,
            "DEPLOYMENT": "production",
            "SECRET_KEY": "bench-only-" + "x" * 40,
            "ALLOWED_HOSTS": "127.0.0.1",
            "DEBUG": "0",
            # Served over plain http here, as docker/compose.yaml serves it: no redirect
            # to https (the cookies stay Secure; Chromium sends them to 127.0.0.1).
            "SECURE_SSL_REDIRECT": "0",
        }
        command = [
            str(Path(sys.executable).parent / "gunicorn"),
            "config.wsgi:application",
            f"--bind=127.0.0.1:{port}",
            "--workers=2",
            "--worker-class=gthread",
            "--threads=8",
            "--log-level=warning",
        ]
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    return server, wait_until_serving(server, port)


def timed_load(page: Any, url: str) -> tuple[float, float, int]:
    """Milliseconds to the load event and to both plots drawn, and bytes transferred."""
    page.goto(url, wait_until="load")
    page.wait_for_function(PLOTS_DRAWN, polling="raf", timeout=30_000)
    drawn = float(page.evaluate("performance.now()"))
    loaded, transferred = page.evaluate(
        "(() => { const nav = performance.getEntriesByType('navigation')[0];"
        " const res = performance.getEntriesByType('resource');"
        " const bytes = res.reduce((n, r) => n + r.transferSize, nav.transferSize);"
        " return [nav.loadEventEnd, bytes]; })()"
    )
    return float(loaded), drawn, int(transferred)


def report(label: str, loads: list[tuple[float, float, int]]) -> None:
    load_ms = [load for load, _, _ in loads]
    drawn_ms = [drawn for _, drawn, _ in loads]
    print(
        f"{label:5} load event median {statistics.median(load_ms):6.0f} ms "
        f"(max {max(load_ms):.0f}) · plots drawn median {statistics.median(drawn_ms):6.0f} ms "
        f"(max {max(drawn_ms):.0f}) · {loads[-1][2] / 1024:.0f} KiB transferred"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--dev", action="store_true", help="runserver, DEBUG on (make run)")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from tests.chromium import LAUNCH_ARGS, chromium_path, login

    episode_id = seed()
    server, base = serve(args.dev)
    url = f"{base}/episodes/{episode_id}/"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
            viewport = {"width": 1400, "height": 1000}
            # bypass_csp: the timing probes are JavaScript strings, which the pages' CSP
            # (no eval) would refuse; the pages themselves need no exception.
            first = browser.new_context(viewport=viewport, bypass_csp=True)
            login(first.new_page(), base, USERNAME, PASSWORD)
            session = first.storage_state()
            first.close()
            cold, warm = [], []
            for _ in range(args.loads):
                context = browser.new_context(
                    viewport=viewport, storage_state=session, bypass_csp=True
                )
                page = context.new_page()
                cold.append(timed_load(page, url))
                warm.append(timed_load(page, url))
                context.close()
            browser.close()
        server_label = "runserver, DEBUG on" if args.dev else "gunicorn, production settings"
        print(f"episode {episode_id} viewer, {server_label}, Chromium at 1400×1000")
        report("cold", cold)
        report("warm", warm)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
