#!/usr/bin/env python
"""Load benchmark: Fleet served as ``make run`` serves it, on the 100,000-GPU demo fleet, at 4 and at 16
concurrent clients (60 s each).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_load .venv/bin/python bench/load.py

On a DEDICATED database (the one in DATABASE_URL when its name contains "bench_load", else
``fleet_bench_load`` on the same server; dropped and re-created unless ``--reuse``): migrate,
createcachetable, ``bootstrap --demo-gpus N`` (default 100,000: the size Fleet is built for; the demo fleet
``make run`` loads, with 24 h of telemetry),
then the Procfile's ``web`` process (gunicorn with ``fleet/gunicorn_conf.py``) on a free port, with a Celery
worker and beat as ``make run`` has them (``--no-background`` leaves them out). ``REDIS_URL`` is used when set,
as ``make run`` would.

The clients (``--clients``, a comma-separated list of levels, default ``4,16``; each level split over two
processes so the client's own GIL does not queue them) each keep one HTTP/1.1 connection and pick, per
request, from a realistic mix over varied URLs: the API GPU list (first page, or filtered by a random
site and state) and up to 4 more pages by its cursor, a lookup by serial (API), the HTML GPU list (first
page, a page after a random GPU, a random filter, a random sort key), a GPU's own page and the heatmap
data. Latency is measured at the client, from sending the request to the last byte of the response. Any
status other than 200, and any connection error, is an error. Server CPU per request is the CPU the
gunicorn processes used during a level's run over its requests; PostgreSQL's CPU per request is reported beside
it (``load_pg_cpu_ms_per_req_N``: every postgres process, so the Celery worker's and beat's queries too).

What the server keeps between requests, and which cases it serves: the heatmap kind asks for the same fleet-wide
document every time, and each gunicorn process keeps it for 5 s (``DOCUMENT_MAX_AGE`` in telemetry/selectors.py,
as it does for operators whose heatmap pages refresh), so per process at most one request in 5 s builds it and
the others encode the kept one; the HTML list kinds reuse the filter form's HTML each process keeps per query
string without the page cursor (30 s, inventory/views/gpus.py: an operator paging through a filtered list renders
it once), so after the first request of each filter and sort in a process they skip it; sessions are read from
the cache. Every other request reads the database.

The last line of output is one JSON object: per level N, ``load_p50_ms_N``, ``load_p99_ms_N``,
``load_cpu_ms_per_req_N``, ``load_pg_cpu_ms_per_req_N``, ``load_rps_N``, ``load_errors_N``; ``errors`` over all
levels (targets at 16 clients on 100,000 GPUs: 0 errors, p99 <= 200 ms, server CPU per request <= 4 ms) and the
server's configuration. The machine's cores are shared by the server, PostgreSQL, Redis, Celery and the clients:
figures are noisy; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from benchlib import bench_database_url, loadavg, postgres_cpu, recreate_database, say

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TARGETS = {"errors": 0, "p99_ms": 200.0, "cpu_ms_per_req": 4.0}
MIX = (("api_list", 15), ("api_filtered", 10), ("api_cursor", 0), ("serial", 20), ("html_list", 10),
       ("html_deep", 15), ("html_filtered", 10), ("html_sorted", 5), ("gpu_page", 5), ("heatmap", 10))
STATES = ("in_service", "spare", "drained", "rma", "burn_in")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True,  # noqa: S603
                         text=True)
    return out.stdout


# --- the clients ---------------------------------------------------------------------------------------------


class Client:
    """One keep-alive connection, the viewer's session cookie and API token."""

    def __init__(self, port: int, cookie: str, token: str) -> None:
        self.port, self.cookie, self.token = port, cookie, token
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str, *, api: bool) -> tuple[int, bytes, float]:
        headers = {"Authorization": f"Token {self.token}"} if api else {"Cookie": self.cookie}
        started = time.perf_counter()
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self.conn.request("GET", path, headers=headers)
                response = self.conn.getresponse()
                body = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return response.status, body, time.perf_counter() - started
            except (ConnectionError, http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
                started = time.perf_counter()  # a kept-alive connection the server closed: reconnect once
        raise AssertionError("unreachable")


def pick(kind: str, rng: random.Random, fixtures: dict) -> tuple[str, bool]:
    """The path of one request of ``kind`` (not ``api_cursor``: that follows a list's ``next``), and whether it
    is an API request. bench/request_cpu.py draws the same paths."""
    if kind in ("api_list", "api_filtered"):
        query = "?" + urlencode({"site": rng.choice(fixtures["sites"]), "state": rng.choice(STATES)}) \
            if kind == "api_filtered" else ""
        return f"/api/v1/gpus/{query}", True
    if kind == "serial":
        return "/api/v1/gpus/?" + urlencode({fixtures["serial_param"]: rng.choice(fixtures["serials"])}), True
    if kind == "html_list":
        return "/gpus/", False
    if kind == "html_deep":
        return f"/gpus/?after={rng.choice(fixtures['ids'])}", False
    if kind == "html_filtered":
        return "/gpus/?" + urlencode({"site": rng.choice(fixtures["sites"]), "state": rng.choice(STATES)}), False
    if kind == "html_sorted":
        return f"/gpus/?sort={rng.choice(('serial', 'state', '-id'))}", False
    if kind == "gpu_page":
        return f"/gpus/{rng.choice(fixtures['ids'])}/", False
    if kind == "heatmap":
        return "/api/v1/telemetry/heatmap/", True
    raise ValueError(kind)


def next_path(body: bytes) -> str | None:
    """The path of an API list page's ``next`` link (None on the last page)."""
    following = json.loads(body).get("next")
    return urlsplit(following)._replace(scheme="", netloc="").geturl() if following else None


def client_thread(port: int, cookie: str, token: str, fixtures: dict, until: float, seed: int,
                  out: list[tuple[str, int, float]]) -> None:
    rng = random.Random(seed)
    client = Client(port, cookie, token)
    kinds = [kind for kind, weight in MIX for _ in range(weight)]
    while time.perf_counter() < until:
        kind = rng.choice(kinds)
        try:
            path, api = pick(kind, rng, fixtures)
            status, body, seconds = client.get(path, api=api)
            out.append((kind, status, seconds))
            if kind in ("api_list", "api_filtered"):
                pages = rng.randint(0, 4)
                while status == 200 and pages and time.perf_counter() < until and (path := next_path(body)):
                    status, body, seconds = client.get(path, api=True)
                    out.append(("api_cursor", status, seconds))
                    pages -= 1
        except Exception:  # noqa: BLE001 - a connection error is an error of the run, counted
            out.append((kind, -1, 0.0))


def client_process(args: tuple) -> list[tuple[str, int, float]]:
    port, cookie, token, fixtures, threads, start_at, seconds, seed = args
    while time.time() < start_at:
        time.sleep(0.01)
    until = time.perf_counter() + seconds
    results: list[list[tuple[str, int, float]]] = [[] for _ in range(threads)]
    workers = [threading.Thread(target=client_thread, args=(port, cookie, token, fixtures, until, seed * 100 + i,
                                                            results[i])) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return [row for rows in results for row in rows]


# --- set-up ----------------------------------------------------------------------------------------------------


def login(port: int, username: str, password: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/login/")
    response = conn.getresponse()
    response.read()
    csrf = re.search(r"csrftoken=([^;]+)", response.getheader("Set-Cookie", "")).group(1)  # type: ignore[union-attr]
    body = urlencode({"username": username, "password": password, "csrfmiddlewaretoken": csrf, "next": "/gpus/"})
    conn.request("POST", "/login/", body=body, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                       "Cookie": f"csrftoken={csrf}"})
    response = conn.getresponse()
    response.read()
    session = re.search(r"sessionid=([^;]+)", response.getheader("Set-Cookie", ""))
    if response.status != 302 or not session:
        sys.exit(f"login as {username} failed: {response.status}")
    return f"csrftoken={csrf}; sessionid={session.group(1)}"


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    sys.exit("the server did not become ready")


def fixtures_collect(port: int, token: str) -> dict:
    """Serial numbers and GPU ids to look up, read through the API as a client would."""
    client = Client(port, "", token)
    serials, ids = [], []
    path = "/api/v1/gpus/"
    for _ in range(20):
        status, body, _ = client.get(path, api=True)
        page = json.loads(body)
        serials += [gpu["serial"] for gpu in page["results"]]
        ids += [gpu["id"] for gpu in page["results"]]
        if not page.get("next"):
            break
        path = urlsplit(page["next"])._replace(scheme="", netloc="").geturl()
    # The exact ?serial= filter where the API has it (an older one ignores the parameter: its first page is
    # not the one GPU asked for), else the search ?q=.
    status, body, _ = client.get("/api/v1/gpus/?" + urlencode({"serial": serials[-1]}), api=True)
    exact = status == 200 and [gpu["serial"] for gpu in json.loads(body)["results"]] == [serials[-1]]
    status, body, _ = client.get("/api/v1/sites/?page_size=100", api=True)
    sites = [site["code"] for site in json.loads(body)["results"]]
    return {"serials": serials, "ids": ids, "serial_param": "serial" if exact else "q", "sites": sites}


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and its descendants that are alive (the web
    server's workers): per request, a figure the other load on the machine moves much less than latency."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += (int(stats[pid][11]) + int(stats[pid][12])) / os.sysconf("SC_CLK_TCK")
        todo.extend(children.get(pid, []))
    return total


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=100_000,
                        help="demo fleet size (default 100,000; --gpus 500 for a smoke run)")
    parser.add_argument("--clients", default="4,16", help="client levels, comma-separated (default 4,16)")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep a bench database that already holds the fleet "
                        "(set up by an earlier run: no migrate, no bootstrap)")
    parser.add_argument("--no-background", action="store_true", help="no Celery worker and beat")
    parser.add_argument("--worker-class", default=None, help="override fleet/gunicorn_conf.py (sync, gthread)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--keepalive", type=int, default=None)
    parser.add_argument("--port", type=int, default=None, help="serve on this port (default: a free one)")
    args = parser.parse_args()

    url = bench_database_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fleet_bench_load"),
                             "fleet_bench_load")
    var = Path(tempfile.mkdtemp(prefix="fleet-load-"))
    env = {**os.environ, "DATABASE_URL": url, "FLEET_VAR_DIR": str(var), "FLEET_DEMO_BMC_URL": "http://127.0.0.1:9",
           "PROMETHEUS_MULTIPROC_DIR": str(var / "prometheus")}
    for name, value in (("GUNICORN_WORKER_CLASS", args.worker_class), ("GUNICORN_WORKERS", args.workers),
                        ("GUNICORN_THREADS", args.threads), ("GUNICORN_KEEPALIVE", args.keepalive)):
        if value is not None:
            env[name] = str(value)
    say(f"Fleet load benchmark on {urlsplit(url).path.lstrip('/')} ({loadavg()})")
    started = time.perf_counter()
    if not args.reuse:
        recreate_database(url)
        manage(env, "migrate", "--no-input")
        manage(env, "createcachetable")
        manage(env, "bootstrap", "--demo-gpus", str(args.gpus))
    password = manage(env, "shell", "-c", "from django.contrib.auth import get_user_model as g; u = g().objects."
                      "get(username='viewer'); u.set_password('load-bench-viewer'); u.save(); print('ok')")
    assert password.strip().splitlines()[-1] == "ok", password
    token = manage(env, "shell", "-c", "from django.contrib.auth import get_user_model as g; "
                   "from fleet.tokens import token_create; u = g().objects.get(username='viewer'); "
                   "print(token_create(user=u, name='load', scope='read', actor=u)[1])").strip().splitlines()[-1]
    say(f"set-up ({args.gpus:,} demo GPUs, 24 h of telemetry): {time.perf_counter() - started:.1f} s")

    port = args.port or free_port()
    env["PORT"] = str(port)
    web = [str(ROOT / ".venv/bin/gunicorn"), "fleet.wsgi", "--config", "fleet/gunicorn_conf.py"]  # the Procfile's
    procs = [subprocess.Popen(web, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,  # noqa: S603
                              stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    if not args.no_background:  # as the Procfile runs them
        procs.extend(subprocess.Popen([str(ROOT / ".venv/bin/celery"), "-A", "fleet", *cmd], cwd=ROOT,  # noqa: S603
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
                     for cmd in (["worker", "--loglevel", "WARNING", "--concurrency", "2"],
                                 ["beat", "--loglevel", "WARNING"]))
    try:
        wait_ready(port, procs[0])
        cookie = login(port, "viewer", "load-bench-viewer")
        fixtures = fixtures_collect(port, token)
        # GPUs from across the whole fleet (not only the first pages): ids and serials to visit and look up.
        spread = json.loads(manage(env, "shell", "-c", "import json, random; from inventory.models import Gpu; "
                                   "rows = list(Gpu.objects.exclude(serial=None).values_list('id', 'serial')); "
                                   "print(json.dumps(random.Random(1).sample(rows, min(len(rows), 5000))))"
                                   ).strip().splitlines()[-1])
        fixtures["ids"] = [row[0] for row in spread]
        fixtures["serials"] = [row[1] for row in spread]
        config = json.loads(subprocess.run(  # noqa: S603
            [PY, "-c", "import json, runpy; c = runpy.run_path('fleet/gunicorn_conf.py'); print(json.dumps("
             "{k: c[k] for k in ('worker_class', 'workers', 'threads', 'keepalive')}))"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout)
        say(f"gunicorn {config}; background: {'none' if args.no_background else 'celery worker + beat'}; "
            f"serial lookups by ?{fixtures['serial_param']}=")
        levels = [int(level) for level in str(args.clients).split(",")]
        results: dict[int, tuple[list, float, float]] = {}
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            for level in levels:
                processes = 2 if level >= 2 else 1
                per = [level // processes + (1 if i < level % processes else 0) for i in range(processes)]
                warm = time.time() + 1
                pool.map(client_process, [(port, cookie, token, fixtures, n, warm, args.warmup, i)
                                          for i, n in enumerate(per)])
                say(f"{level} clients: warm-up {args.warmup:.0f} s done ({loadavg()})")
                start_at = time.time() + 1
                cpu_before, pg_before = tree_cpu_seconds(procs[0].pid), postgres_cpu()
                rows = [row for part in pool.map(client_process, [(port, cookie, token, fixtures, n, start_at,
                                                                   args.seconds, 10 * level + i)
                                                                  for i, n in enumerate(per)])
                        for row in part]
                results[level] = (rows, tree_cpu_seconds(procs[0].pid) - cpu_before, postgres_cpu() - pg_before)
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    figures: dict[str, object] = {}
    for level, (rows, server_cpu, pg_cpu) in results.items():
        figures.update(level_report(level, rows, server_cpu, pg_cpu, args.seconds))
    figures["errors"] = sum(int(figures[f"load_errors_{level}"]) for level in results)  # type: ignore[call-overload]
    figures.update({"gpus": args.gpus, "gunicorn": config, "load": [round(x, 1) for x in os.getloadavg()]})
    print(json.dumps(figures), flush=True)


def level_report(level: int, rows: list[tuple[str, int, float]], server_cpu: float, pg_cpu: float,
                 seconds: float) -> dict:
    errors = [row for row in rows if row[1] != 200]
    say(f"\n{level} clients for {seconds:.0f} s ({loadavg()}):")
    for kind, _ in MIX:
        times = [row[2] * 1000 for row in rows if row[0] == kind and row[1] == 200]
        if times:
            say(f"  {kind:<13} {len(times):6d} req  p50 {statistics.median(times):6.1f}  p95 {percentile(times, 95):6.1f}"
                f"  p99 {percentile(times, 99):6.1f}  max {max(times):7.1f} ms")
    times = [row[2] * 1000 for row in rows if row[1] == 200] or [0.0]
    p50, p99 = round(statistics.median(times), 1), round(percentile(times, 99), 1)
    statuses = sorted({row[1] for row in errors})
    cpu_ms = round(server_cpu * 1000 / max(len(rows), 1), 2)
    pg_ms = round(pg_cpu * 1000 / max(len(rows), 1), 2)
    say(f"  all           {len(rows):6d} req  p50 {p50:6.1f}  p95 {percentile(times, 95):6.1f}  "
        f"p99 {p99:6.1f} ms  [target <= {TARGETS['p99_ms']:.0f}: {'ok' if p99 <= TARGETS['p99_ms'] else 'MISSES'}]  "
        f"{len(rows) / seconds:.0f} req/s; errors {len(errors)} {statuses if errors else ''}")
    say(f"  web server CPU per request: {cpu_ms} ms [target <= {TARGETS['cpu_ms_per_req']:.0f}: "
        f"{'ok' if cpu_ms <= TARGETS['cpu_ms_per_req'] else 'MISSES'}] (gunicorn workers); PostgreSQL beside it: "
        f"{pg_ms} ms per request (every postgres process, the Celery worker's and beat's queries included)")
    return {f"load_p50_ms_{level}": p50, f"load_p99_ms_{level}": p99, f"load_cpu_ms_per_req_{level}": cpu_ms,
            f"load_pg_cpu_ms_per_req_{level}": pg_ms, f"load_rps_{level}": round(len(rows) / seconds),
            f"load_errors_{level}": len(errors)}

if __name__ == "__main__":
    main()
