"""calibrate --nccl-tests: nccl-tests logs read as the tests print them, the links' constants fitted to them and
written for --hardware."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from costmodel import InputError
from costmodel._hardware import gpu_preset
from costmodel._nccl_tests import NcclLog, fit_links, model_s, parse_nccl_log
from tests.in_process import cli, one_error_line

DEVICE = "NVIDIA H100 80GB HBM3"


def log_text(program: str, hosts: int, per_host: int, sizes, times_us, *, starting: bool = True,
             device: str = DEVICE) -> str:
    """A log as nccl-tests 2.19 prints it (NVIDIA/nccl-tests src/util.cu writeDeviceReport, writeResultHeader,
    writeBenchmarkLinePreamble / Body): header, one rank line per rank, the table, the footer."""
    lines = ["# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807"]
    if starting:
        lines.append(f"# Collective test starting: {program}")
    lines += ["# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
              "agg iters: 1 validation: 1 graph: 0 unalign: 0", "#", "# Using devices"]
    for r in range(hosts * per_host):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on {'node%03d' % (r // per_host):>10s} device "
                     f"{r % per_host:2d} [0000:{r % per_host:02x}:00] {device}")
    lines += ["#", "#                                                              out-of-place                       "
              "in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw "
              "  busbw #wrong ",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s) "
              " (GB/s)       "]
    redop = "none" if "gather" in program else "sum"
    for size, t in zip(sizes, times_us, strict=True):
        alg = size / t / 1e3
        lines.append(f"{size:12d}  {size // 4:12d}  {'float':>8s}  {redop:>6s}  {-1:6d}  {t:7.2f}  {alg:6.2f}  "
                     f"{alg:6.2f}  {0:6d}  {t:7.2f}  {alg:6.2f}  {alg:6.2f}  {0:6d}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.3456 ", "#",
              f"# Collective test concluded: {program}", ""]
    return "\n".join(lines)


def test_a_log_reads_as_printed():
    text = log_text("all_gather_perf", 2, 4, [1024, 1048576], [12.5, 1234.0])
    lg = parse_nccl_log(text, "ag.log")
    assert (lg.collective, lg.ranks, lg.nodes, lg.per_node, lg.gpu_name) == ("all_gather", 8, 2, 4, DEVICE)
    assert lg.size_bytes.tolist() == [1024, 1048576]
    assert lg.time_s.tolist() == pytest.approx([12.5e-6, 1234e-6])


def test_an_older_log_names_its_collective_by_its_file_name():
    text = log_text("reduce_scatter_perf", 1, 8, [4096], [20.0], starting=False)
    assert parse_nccl_log(text, "runs/reduce-scatter-8gpu.txt").collective == "reduce_scatter"


@pytest.mark.parametrize("text, needle", [
    (log_text("broadcast_perf", 1, 8, [8], [5.0]), "all_reduce_perf, all_gather_perf or reduce_scatter_perf"),
    (log_text("all_reduce_perf", 1, 8, [8], [5.0], starting=False), "Collective test starting"),
    (log_text("all_reduce_perf", 1, 8, [], []), "at least one table row"),
    ("# Collective test starting: all_reduce_perf\n       1024   256  float  sum  -1  5.0  0.2  0.3  0\n",
     "Rank R Group G Pid P on HOST"),
    (log_text("all_reduce_perf", 2, 4, [8], [5.0]).replace("node001 device  3", "node000 device  3"),
     "the same number of ranks on every host"),
    (log_text("all_reduce_perf", 1, 8, [8], [5.0]).replace("   5.00  ", "  hello  ", 1), "line"),
    (log_text("all_reduce_perf", 1, 8, [8], [5.0]).replace("   5.00  ", "   0.00  ", 1), "a time > 0 us"),
])
def test_a_log_that_does_not_read_is_named(text, needle):
    with pytest.raises(InputError) as exc:
        parse_nccl_log(text, "x.log")
    assert "--nccl-tests x.log" in str(exc.value) and needle in str(exc.value)


SIZES = [2 ** k for k in range(3, 34)]
# Constants a cluster could have: lower link efficiency and slower hops than the H100 preset's.
PLANTED = {"link_eff": 0.62, "scaleup_latency_s": 3.1e-6, "scaleout_latency_s": 23e-6}
LAYOUTS = (("all_gather", 8, 8), ("all_reduce", 1, 8), ("reduce_scatter", 32, 8))


def planted_logs() -> list[NcclLog]:
    """Logs whose times are the model's at PLANTED on an H100 cluster's links, over 8 B to 8 GiB."""
    gpu = gpu_preset("h100")
    out = []
    for coll, hosts, per in LAYOUTS:
        lg = NcclLog("x.log", coll, hosts * per, hosts, per, DEVICE, np.array(SIZES, dtype=float),
                     np.ones(len(SIZES)))
        out.append(dataclasses.replace(lg, time_s=model_s(lg, gpu, gpu.scaleup_Bps, gpu.scaleout_Bps, PLANTED)))
    return out


def test_the_fit_finds_the_constants_the_times_were_made_with():
    gpu = gpu_preset("h100")
    fitted = fit_links(planted_logs(), gpu, gpu.scaleup_Bps, gpu.scaleout_Bps)
    assert fitted == pytest.approx(PLANTED, rel=0.01)


def test_one_host_logs_leave_the_network_latency_alone():
    gpu = gpu_preset("h100")
    fitted = fit_links(planted_logs()[1:2], gpu, gpu.scaleup_Bps, gpu.scaleout_Bps)
    assert set(fitted) == {"link_eff", "scaleup_latency_s"}
    assert fitted["link_eff"] == pytest.approx(PLANTED["link_eff"], rel=0.01)


def _write_logs(tmp_path) -> list[str]:
    paths = []
    for lg, (coll, hosts, per) in zip(planted_logs(), LAYOUTS, strict=True):
        p = tmp_path / f"{coll}.log"
        p.write_text(log_text(f"{coll}_perf", hosts, per, SIZES, (lg.time_s * 1e6).tolist()))
        paths.append(str(p))
    return paths


def test_calibrate_writes_them_and_keeps_what_the_file_had(tmp_path):
    out = tmp_path / "hw.json"
    out.write_text(json.dumps({"h100": {"gemm_eff_max": 0.7}, "a100": {"hbm_eff": 0.5}}))
    res = cli("calibrate", "--nccl-tests", *_write_logs(tmp_path), "--out", str(out))
    assert res.returncode == 0, res.stderr
    written = json.loads(out.read_text())
    h100 = written["H100-SXM5-80GB"]
    # the logs print times to 0.01 us: the fit is as close as that rounding lets it be
    assert {k: h100[k] for k in PLANTED} == pytest.approx(PLANTED, rel=0.03)
    assert h100["gemm_eff_max"] == 0.7 and written["A100-SXM4-80GB"]["hbm_eff"] == 0.5
    assert "fitted: link_eff 0.800 -> 0.6" in res.stdout
    # and the plans priced with them pay the slower links
    plan = ("--model", "llama3-8b", "--cluster", "h100x64", "--dp", "8", "--tp", "8", "--pp", "1",
            "--global-batch", "64", "--sequence-parallel", "--json")
    slow, fast = (json.loads(cli("evaluate", *plan, *extra).stdout)["metrics"]["step_time_s"]
                  for extra in (("--hardware", str(out)), ()))
    assert slow > fast


@pytest.mark.parametrize("argv, needle", [
    (("calibrate",), "FILE.csv|SET: expected measured runs or --nccl-tests logs, one of the two, got 'neither'"),
    (("calibrate", "narayanan2021-table1", "--nccl-tests", "a.log"), "got 'both'"),
    (("calibrate", "narayanan2021-table1", "--cluster", "h100x64"), "--cluster: expected no --cluster beside"),
    (("calibrate", "--nccl-tests", "missing.log"), "--nccl-tests missing.log: expected an existing nccl-tests log"),
    (("calibrate", "--nccl-tests", "LOG", "--cluster", "a100x64"), "a log of A100-SXM4-80GB GPUs"),
    (("calibrate", "--nccl-tests", "LOG", "--cluster", "a100x64+h100x64"), "a cluster of one GPU type"),
])
def test_calibrate_refuses_in_one_line(argv, needle, tmp_path):
    log = tmp_path / "ar.log"
    log.write_text(log_text("all_reduce_perf", 1, 8, [8, 1024], [10.0, 12.0]))
    out = tmp_path / "hw.json"
    res = cli(*[str(log) if a == "LOG" else a for a in argv], "--out", str(out))
    one_error_line(res, needle)
    assert not out.exists()


def test_a_log_of_an_unknown_gpu_needs_the_cluster(tmp_path):
    log = tmp_path / "ar.log"
    log.write_text(log_text("all_reduce_perf", 1, 8, [8, 1 << 30], [10.0, 9000.0], device="Mystery GPU 9000"))
    one_error_line(cli("calibrate", "--nccl-tests", str(log), "--out", str(tmp_path / "hw.json")),
                   "devices a GPU preset matches (or --cluster naming the GPU)")
    res = cli("calibrate", "--nccl-tests", str(log), "--cluster", "h100x8", "--out", str(tmp_path / "hw.json"))
    assert res.returncode == 0, res.stderr


def test_an_older_logs_columns_and_mpiruns_tagged_lines_read():
    # nccl-tests before 2.11: no "Group" on the rank lines, no "root" column (NVIDIA/nccl-tests issue 100's log);
    # mpirun --tag-output puts "[1,0]<stdout>:" before every line
    text = "\n".join("[1,0]<stdout>:" + line for line in (
        "# Using devices",
        "#   Rank  0 Pid    920 on      node2 device  0 [0x0e] NVIDIA A100-SXM-80GB",
        "#   Rank  1 Pid    921 on      node2 device  1 [0x13] NVIDIA A100-SXM-80GB",
        "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
        "   134217728      33554432     float    none    2345.6   57.22   50.07  0e+00"
        "    2345.0   57.24   50.08  0e+00",
    ))
    lg = parse_nccl_log(text, "all_gather_perf.txt")
    assert (lg.ranks, lg.nodes, lg.gpu_name) == (2, 1, "NVIDIA A100-SXM-80GB")
    assert lg.size_bytes.tolist() == [134217728] and lg.time_s.tolist() == pytest.approx([2345.6e-6])
