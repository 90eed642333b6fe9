"""What the benches share (not a bench itself: `make bench` runs bench/*.py but not bench/_*.py).

Each bench works in a PostgreSQL database of its own, created from DATABASE_URL's server
with every migration applied and dropped at the end, so it measures and meters only the
machines it made: never a developer's `make run` data, never another engineer's rows.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "1")
# Pushes of this run travel under a channel prefix nobody else uses.
os.environ.setdefault("CHANNEL_PREFIX", f"bench-{uuid.uuid4().hex[:8]}")


def setup_django() -> None:
    import django

    django.setup()


@contextlib.contextmanager
def own_database(tag: str):
    """A fresh, migrated database for this bench, dropped afterwards; yields its URL."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    if connection.vendor != "postgresql":
        raise SystemExit("the benches need PostgreSQL: set DATABASE_URL=postgres://…")
    db = settings.DATABASES["default"]
    name = f"{db['NAME']}_bench_{tag}_{os.getpid()}"
    db.setdefault("TEST", {})["NAME"] = name
    # Build the ORM's connection to the new database before anything is measured.
    state = setup_databases(verbosity=0, interactive=False)
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    url = f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{name}"
    try:
        yield url
    finally:
        connection.close()
        teardown_databases(state, verbosity=0)


def machine_cpu_seconds() -> float:
    """CPU time every process of this computer has used so far, all CPUs (/proc/stat)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * p
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(rows: list[tuple[str, str, str, bool]]) -> str:
    """The issue's table: measure | measured | goal | met."""
    lines = ["| measure | measured | goal | met |", "| --- | --- | --- | --- |"]
    lines += [f"| {measure} | {measured} | {goal} | {'yes' if met else 'NO'} |" for measure, measured, goal, met in rows]
    return "\n".join(lines)


class ProcessStarts:
    """Programs started (execve) inside chosen PID namespaces, from the kernel's
    `sched:sched_process_exec` tracepoint recorded by `perf record --namespaces` for the whole
    computer: each new task's PID namespace is recorded when it is made, so every exec is
    put to the node it ran in, whatever else this computer runs meanwhile (other engineers'
    tests included). Times are CLOCK_MONOTONIC, as `time.monotonic()`, so a run's phases
    can be split by their laps.

        starts = ProcessStarts(workdir); starts.start() … starts.stop()
        starts.count({inode, …}, {"install": (t0, t1), …}) -> ({"install": n, …}, Counter(program))
    """

    def __init__(self, workdir: Path) -> None:
        self.data = Path(workdir) / "process-starts.perf"
        self.process = None
        self.why = ""

    def start(self) -> bool:
        import shutil
        import subprocess

        if os.geteuid() != 0 or not shutil.which("perf"):
            self.why = "needs root and perf (Debian's linux-perf)"
            return False
        self.process = subprocess.Popen(
            ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "--namespaces", "-e", "sched:sched_process_exec",
             "-a", "-o", str(self.data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        # perf takes a moment to open its events on every CPU: nothing before that is seen.
        import time

        time.sleep(1.0)
        if self.process.poll() is not None:
            self.why = "perf record failed: " + (self.process.stderr.read().decode(errors="replace").strip()[-200:] if self.process.stderr else "")
            self.process = None
            return False
        return True

    def stop(self) -> None:
        import signal

        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=60)
            self.process = None

    @staticmethod
    def namespace_of(pid: int) -> int:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino

    def count(self, namespaces: set[int], windows: dict[str, tuple[float, float]]):
        import collections
        import re
        import subprocess

        script = subprocess.run(
            ["perf", "script", "-i", str(self.data), "--show-namespace-events", "-F", "tid,time,event,trace"],
            capture_output=True, text=True, check=True,
        )
        ns_of: dict[int, int] = {}
        per_phase = dict.fromkeys(windows, 0)
        programs: collections.Counter[str] = collections.Counter()
        pending = None
        record = re.compile(r"PERF_RECORD_NAMESPACES (\d+)/(\d+)")
        exec_line = re.compile(r"^\s*(\d+)\s+([\d.]+): sched:sched_process_exec: filename=(\S+)")
        pid_ns = re.compile(r"3/pid: \d+/0x([0-9a-f]+)")
        for line in script.stdout.splitlines():
            if pending is not None:
                found = pid_ns.search(line)
                if found:
                    ns_of[pending] = int(found.group(1), 16)
                    pending = None
                continue
            found = record.search(line)
            if found:
                pending = int(found.group(2))
                continue
            found = exec_line.match(line)
            if found and ns_of.get(int(found.group(1))) in namespaces:
                at = float(found.group(2))
                programs[found.group(3).rsplit("/", 1)[-1]] += 1
                for name, (begin, end) in windows.items():
                    if begin <= at < end:
                        per_phase[name] += 1
                        break
        self.data.unlink(missing_ok=True)
        return per_phase, programs
