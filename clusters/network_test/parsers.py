"""What network_test.sh's tools printed: iperf3's JSON, ping's summary line and nccl-tests'
all_reduce_perf table (docs/nodeops.md, "Network test")."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Iperf3Run:
    """What one `iperf3 --json` client run measured: the receiver's figure (what arrived)."""

    gbps: float | None
    error: str = ""


def iperf3_result(text: str) -> Iperf3Run:
    """Parse `iperf3 -c … --json`. iperf3 reports a failed run inside the JSON ("error")."""
    start = text.find("{")
    if start < 0:
        line = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return Iperf3Run(None, f"iperf3 printed no result: {line or 'no output'}"[:255])
    try:
        data = json.loads(text[start : text.rfind("}") + 1])
    except ValueError as error:
        return Iperf3Run(None, f"unreadable iperf3 output: {error}"[:255])
    if data.get("error"):
        return Iperf3Run(None, f"iperf3: {data['error']}"[:255])
    end = data.get("end") or {}
    summary = end.get("sum_received") or end.get("sum") or {}
    bits = summary.get("bits_per_second")
    if not isinstance(bits, (int, float)):
        return Iperf3Run(None, "iperf3 reported no received bandwidth")
    return Iperf3Run(round(bits / 1e9, 3))


_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max/(?:mdev|stddev) = [\d.]+/([\d.]+)/")


def ping_average_ms(text: str) -> float | None:
    """The average round trip of `ping -q` (Linux iputils or BSD), None when nothing came back."""
    match = _RTT.search(text)
    return round(float(match.group(1)), 3) if match else None


@dataclass(frozen=True)
class NcclRow:
    """One message size of nccl-tests' all_reduce_perf (out-of-place columns)."""

    size_bytes: int
    time_us: float
    algbw_gbs: float  # GB/s
    busbw_gbs: float  # GB/s
    wrong: int


def all_reduce_perf_rows(text: str) -> list[NcclRow]:
    """The result table of `all_reduce_perf`: size count type redop root time algbw busbw
    #wrong (out-of-place), then the same four for in-place. Comment lines start with #."""
    rows = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 9 or line.lstrip().startswith("#") or not words[0].isdigit():
            continue
        try:
            wrong = int(words[8]) if words[8].isdigit() else 0
            rows.append(NcclRow(int(words[0]), float(words[5]), float(words[6]), float(words[7]), wrong))
        except ValueError:
            continue
    return rows


def all_reduce_average_busbw(text: str) -> float | None:
    """`# Avg bus bandwidth    : 70.742` (GB/s), None when the run did not print it."""
    match = re.search(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", text)
    return float(match.group(1)) if match else None
