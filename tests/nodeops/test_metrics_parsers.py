"""What metrics.sh prints, parsed: the node exporter's exposition and nvidia-smi's CSV.

No machine the tests run on has a GPU: the nvidia-smi files under data/ are written in the
format `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` prints (NVIDIA documents it),
not captured from a GPU here."""

from __future__ import annotations

from pathlib import Path

from clusters.nodeops.metrics import parse_exposition, parse_metrics_report, parse_nvidia_smi

DATA = Path(__file__).parent / "data"

REPORT = """\
::metrics:: exporter 127.0.0.1:9100 up
::begin-exposition::
# HELP node_load1 1m load average.
node_load1 1.25
node_memory_MemAvailable_bytes 6.442450944e+09
node_memory_MemTotal_bytes 1.7179869184e+10
node_network_receive_bytes_total{device="wg0"} 123456
node_network_transmit_bytes_total{device="wg0"} 654321
node_cpu_seconds_total{mode="idle"} 900.00
node_cpu_seconds_total{mode="iowait"} 20.00
node_cpu_seconds_total{mode="user"} 70.00
node_cpu_seconds_total{mode="system"} 10.00
::end-exposition::
::metrics:: disk / 100000000000 25000000000
::metrics:: disk /shared 50000000000 40000000000
::begin-gpu::
0, 97, 71234, 81559, 64, 0
::end-gpu::
"""


def test_a_full_report_gives_counters_gauges_disks_and_gpus():
    reading = parse_metrics_report(REPORT)
    assert reading.exporter == "up"
    assert reading.cpu_busy_and_total == (80.0, 1000.0)
    assert reading.memory_total_bytes == 16 * 1024**3 and reading.memory_available_bytes == 6 * 1024**3
    assert reading.load1 == 1.25
    assert (reading.net_rx_bytes, reading.net_tx_bytes) == (123456, 654321)
    assert reading.disks == {"/": (100000000000, 25000000000), "/shared": (50000000000, 40000000000)}
    [gpu] = reading.gpus
    assert gpu.utilization_percent == 97 and gpu.temperature_c == 64 and gpu.uncorrected_errors == 0


def test_a_node_whose_exporter_is_down_still_reports_its_disks():
    reading = parse_metrics_report("::metrics:: exporter 127.0.0.1:9100 down\n::metrics:: disk / 10 5\n")
    assert reading.exporter == "down" and reading.cpu_busy_and_total is None and reading.disks == {"/": (10, 5)}


def test_exposition_labels_escapes_and_junk():
    samples = parse_exposition('a{x="1",y="q\\"uote"} 2\nnot a sample\n# TYPE a gauge\nb NaN\nc 3e2\n')
    assert samples[0] == ("a", {"x": "1", "y": 'q\\"uote'}, 2.0)
    assert [s[0] for s in samples] == ["a", "b", "c"] and samples[2][2] == 300.0


def test_eight_h100s_from_recorded_nvidia_smi_output():
    gpus = parse_nvidia_smi((DATA / "nvidia-smi-8xh100.csv").read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[2].utilization_percent == 0 and gpus[3].uncorrected_errors == 2
    assert gpus[0].memory_total_bytes == 81559 * 1024 * 1024


def test_gpus_without_ecc_or_utilization_read_as_unknown_not_zero():
    first, second = parse_nvidia_smi((DATA / "nvidia-smi-a10-no-ecc.csv").read_text())
    assert first.uncorrected_errors is None and first.utilization_percent == 12
    assert second.utilization_percent is None
