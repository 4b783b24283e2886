"""`plansweep validate` and `plansweep calibrate`: the cost model against measured runs."""

from __future__ import annotations

from pathlib import Path

from cli import COMMAND_HELP, print_json
from cli._cmd_evaluate import add_framework_arg
from cli._specs import one_framework
from costmodel import InputError
from costmodel._bands import bands_from_json
from costmodel._files import check_file_path
from costmodel._validate import (band_summary, band_table_of, calibrate, read_hardware, read_runs, validate,
                                 write_hardware)


def register(sub) -> None:
    p = sub.add_parser("validate", help=COMMAND_HELP["validate"])
    p.add_argument("file", metavar="FILE.csv|SET", help="measured runs (columns: docs/validation.md), or a "
                   "published set shipped with plansweep: narayanan2021-table1")
    p.add_argument("--hardware", help="efficiency constants fitted by `plansweep calibrate`")
    add_framework_arg(p, "the framework of rows whose framework cell is empty", many=False)
    p.add_argument("--json", action="store_true")
    p.add_argument("--write-bands", metavar="PATH", help="also compute the error bands by regime from these runs and "
                   "write them as JSON (plansweep's own: costmodel/data/error_bands.json, from "
                   "tests/data/validation/published_runs.csv; docs/validation.md, \"Error bands\")")
    p.set_defaults(func=run_validate)
    c = sub.add_parser("calibrate", help=COMMAND_HELP["calibrate"],
                       description="Fit a GPU type's efficiency constants to measured runs (FILE.csv: gemm_eff_max, "
                       "hbm_eff, link_eff), or its links' constants to nccl-tests logs (--nccl-tests: link_eff and "
                       "the scale-up and scale-out latencies), and write them for --hardware. An existing --out file "
                       "of constants is read first: the fit starts from them and keeps those it does not move.")
    c.add_argument("file", metavar="FILE.csv|SET", nargs="?", help="measured runs (columns: docs/validation.md), or a "
                   "published set shipped with plansweep: narayanan2021-table1")
    c.add_argument("--nccl-tests", nargs="+", metavar="LOG", help="logs of nccl-tests' all_reduce_perf, "
                   "all_gather_perf or reduce_scatter_perf on your cluster (their output as printed), in place of "
                   "FILE.csv")
    c.add_argument("--cluster", help="with --nccl-tests: the cluster the logs ran on, for its GPU and its links' "
                   "bandwidths (default: the GPU the logs name, with its preset's links)")
    add_framework_arg(c, "the framework of rows whose framework cell is empty", many=False)
    c.add_argument("--out", default="hardware.json", help="where to write the constants (default hardware.json)")
    c.set_defaults(func=run_calibrate)


def empty_cells_framework(args) -> str | None:
    """--framework (one profile), or None: read_runs' default."""
    return None if args.framework is None else one_framework(args.framework, why="of the rows whose cell is empty")


def run_validate(args) -> int:
    if args.write_bands is not None:
        check_file_path("--write-bands", args.write_bands)
    eff = read_hardware(args.hardware) if args.hardware else None
    runs = read_runs(args.file, eff, empty_cells_framework(args))
    res = validate(runs, check_bands=args.write_bands is None)
    some_priced(args.file, res)
    bands = None
    if args.write_bands is not None:  # the runs held to the bands just written (the shipped table may be older)
        bands = write_bands(args.write_bands, band_table_of(args.file, runs, res))
        res.update(band_summary(runs, res["rows"], bands_from_json(bands, args.write_bands)))
    if args.json:
        print_json(res)
        return 0
    print(f"{'run':<16} {'predicted s':>12} {'measured s':>11} {'error':>8} {'band':>4} {'on':>9} {'memory GB':>10}  "
          "chosen for empty cells")
    for r in res["rows"]:
        chosen = ", ".join(f"{k}={v}" for k, v in r["chosen"].items()) or "-"
        err = f"{r['error_pct']:+7.1f}%" if r["error_pct"] != float("inf") else f"{r.get('reason', '-'):>8}"
        mem = f"{r['predicted_memory_gb']:6.1f}" + ("" if r["memory_fits"] is not False else " OOM")
        if "measured_memory_gb" in r:
            mem += f" ({r['measured_memory_gb']:.1f})"
        band = {True: "in", False: "out", None: "-"}[r["inside_band"]]
        print(f"{r['name']:<16} {r['predicted_iteration_time_s']:12.3f} {r['measured_iteration_time_s']:11.3f} "
              f"{err:>8} {band:>4} {r['compared_on'].split('_')[0]:>9} {mem:>10}  {chosen}")
    print(f"mean |error| {res['mean_abs_error_pct']:.1f}%   max |error| {res['max_abs_error_pct']:.1f}%"
          + (f"   {res['out_of_memory_runs']} run(s) predicted out of memory" if res["out_of_memory_runs"] else "")
          + (f"   memory mean |error| {res['memory_mean_abs_error_pct']:.1f}% over {res['memory_runs']} run(s) "
             "publishing allocated memory"
             if res["memory_mean_abs_error_pct"] is not None else "")
          + (f"   reserved peaks: {res['reserved_memory_runs']} run(s), mean "
             f"{res['reserved_memory_mean_above_pct']:.1f}% above the predicted live tensors, "
             f"{res['reserved_memory_below_prediction']} below"
             if res.get("reserved_memory_runs") else ""))
    print(format_band_check(res))
    print(format_gpus(res["gpus"]))
    for first, later in res["repeated_figures"]:
        print(f"note: {later} publishes the same figure as {first}, another layout of the same model on the same "
              "GPUs: one cell copied from the other? (the shipped set leaves such rows out)")
    if bands is not None:
        print(format_bands(bands))
        print(f"wrote {args.write_bands}")
    return 0


def some_priced(file: str, res: dict) -> dict:
    """validate's result ``res`` of the runs in ``file``; InputError naming the file where the model prices none of
    them (each fails a structural check: the first one's says which)."""
    rows = res["rows"]
    if rows and res["unpriced_runs"] == len(rows):
        why = f"{rows[0]['name']}: {rows[0].get('reason', 'not priced')}"
        raise InputError(file, "at least one run the model can price", f"{len(rows)} run(s), none priced ({why})")
    return res


def write_bands(path: str, table: dict) -> dict:
    """Write the band table as JSON, whole or not at all."""
    import json

    from costmodel._files import replaced_for

    with replaced_for("--write-bands", path) as tmp:
        Path(tmp).write_text(json.dumps(table, indent=1) + "\n")
    return table


def format_band_check(res: dict) -> str:
    """How many priced runs fall inside the error band plansweep gives a plan of their regime, overall and by regime
    (validate's "regimes"), as lines."""
    n, k = res["band_checked_runs"], res["inside_band_runs"]
    out = [f"inside plansweep's error bands: {k} of {n} priced run(s)" + (f" ({100 * k / n:.0f}%)" if n else "")
           + "; by regime (framework x parallelism):",
           f"  {'regime':<26} {'runs':>4} {'mean |error|':>12} {'inside band':>11}"]
    for g in res["regimes"]:
        out.append(f"  {g['regime']:<26} {g['runs']:>4} {g['mean_abs_error_pct']:>11.1f}% "
                   f"{g['inside_band']:>6} of {g['runs']}")
    return "\n".join(out)


def format_gpus(gpus: list[dict]) -> str:
    """validate's per-GPU record ("gpus") as lines: each GPU type's priced runs, mean |error| and mean signed error
    (+: the model slow)."""
    out = ["by GPU type:", f"  {'gpu':<26} {'runs':>4} {'mean |error|':>12} {'mean signed':>11}"]
    out += [f"  {g['gpu']:<26} {g['runs']:>4} {g['mean_abs_error_pct']:>11.1f}% {g['mean_signed_error_pct']:>+10.1f}%"
            for g in gpus]
    return "\n".join(out)


def format_bands(table: dict) -> str:
    """The band table's regimes that hold runs, and the level, as lines."""
    out = [f"error bands at conformal level {table['level']:.2f} (regimes of {table['min_runs']}+ runs; "
           f"leave-one-source-out coverage {100 * table['loso_coverage']:.1f}% of {table['priced_runs']} runs):",
           f"  {'regime':<24} {'runs':>4} {'band':>15} {'LOSO inside':>11}"]
    for c in table["regimes"]:
        if c["runs"]:
            cover = "-" if c["loso_coverage"] is None else f"{100 * c['loso_coverage']:.0f}%"
            band = f"{c['low_pct']:+.1f}%/{c['high_pct']:+.1f}%"
            note = "" if c["regime"] == f"{c['family']} x {c['parallelism']}" else "  " + c["regime"]
            out.append(f"  {c['family'] + ' x ' + c['parallelism']:<24} {c['runs']:>4} {band:>15} {cover:>11}{note}")
    return "\n".join(out)


def run_calibrate(args) -> int:
    if (args.file is None) == (args.nccl_tests is None):
        raise InputError("FILE.csv|SET", "measured runs or --nccl-tests logs, one of the two",
                         "both" if args.file else "neither")
    if args.nccl_tests is None and args.cluster is not None:
        raise InputError("--cluster", "no --cluster beside measured runs (each row names its GPUs)", args.cluster)
    if args.nccl_tests is not None and args.framework is not None:
        raise InputError("--framework", "no --framework beside --nccl-tests (no run is priced)", args.framework)
    out = Path(args.out)
    check_file_path("--out", args.out)
    start = constants_in(out)
    if args.nccl_tests is not None:
        return calibrate_links(args, out, start)
    runs = read_runs(args.file, start or None, framework=empty_cells_framework(args))
    before = some_priced(args.file, validate(runs))["mean_abs_error_pct"]
    fitted = calibrate(runs)
    after = validate(read_runs(args.file, fitted, empty_cells_framework(args)))["mean_abs_error_pct"]
    write_hardware(out, {**start, **fitted})
    for name, eff in fitted.items():
        consts = ", ".join(f"{k}={getattr(eff, k):.4g}" for k in ("gemm_eff_max", "hbm_eff", "link_eff"))
        print(f"{name}: {consts}")
    print(f"mean |error| on {args.file}: {before:.2f}% before, {after:.2f}% after; wrote {out}")
    print(f"use it with: plansweep validate {args.file} --hardware {out}")
    return 0


def calibrate_links(args, out: Path, start: dict) -> int:
    """calibrate --nccl-tests: the logs' GPU's link_eff and latencies fitted (costmodel._nccl_tests.fit_links) from
    its constants in ``start`` (the --out file's) or its preset's, written into --out beside the file's others."""
    import dataclasses

    import numpy as np

    from cli._specs import load_cluster
    from costmodel._hardware import Cluster, efficiency_of
    from costmodel._nccl_tests import fit_links, log_errors, log_gpu, read_nccl_log

    logs = [read_nccl_log(p) for p in args.nccl_tests]
    cluster = load_cluster(args.cluster) if args.cluster else None
    if cluster is not None and not isinstance(cluster, Cluster):
        raise InputError("--cluster", "a cluster of one GPU type (the logs' links)", args.cluster)
    gpu = log_gpu(logs, None if cluster is None else cluster.gpu)
    if gpu.name in start:
        gpu = dataclasses.replace(gpu, **dataclasses.asdict(start[gpu.name]))
    up, net = (gpu.scaleup_Bps, gpu.scaleout_Bps) if cluster is None else (cluster.scaleup_Bps, cluster.scaleout_Bps)
    fitted = fit_links(logs, gpu, up, net)
    before, after = log_errors(logs, gpu, up, net), log_errors(logs, gpu, up, net, fitted)
    write_hardware(out, {**start, gpu.name: dataclasses.replace(efficiency_of(gpu), **fitted)})
    print(f"nccl-tests logs on {gpu.name} (links {up / 1e9:g} GB/s inside a node, {net / 1e9:g} GB/s across nodes, "
          "per GPU per direction): the model's time against the measured, median |model / measured - 1|")
    print(f"  {'log':<28} {'collective':<14} {'ranks':>5} {'nodes':>5} {'sizes':>5} {'before':>8} {'after':>8}")
    for lg, b, a in zip(logs, before, after, strict=True):
        med = [100 * float(np.median(np.abs(np.expm1(e)))) for e in (b, a)]
        print(f"  {Path(lg.path).name[:28]:<28} {lg.collective:<14} {lg.ranks:>5} {lg.nodes:>5} {len(lg.time_s):>5} "
              f"{med[0]:7.1f}% {med[1]:7.1f}%")
    units = {"link_eff": (1.0, "", ".3f"), "scaleup_latency_s": (1e6, " us", ".2f"),
             "scaleout_latency_s": (1e6, " us", ".2f")}
    print("fitted: " + ", ".join(f"{k} {getattr(gpu, k) * units[k][0]:{units[k][2]}} -> "
                                 f"{v * units[k][0]:{units[k][2]}}{units[k][1]}" for k, v in fitted.items()))
    print(f"wrote {out}: --hardware {out} prices with them (evaluate, rank, sweep, search, export, validate)")
    return 0


def constants_in(path: Path) -> dict:
    """The constants an existing --out file holds, kept beside the fitted ones; {} where there is no such file or it
    holds none (it is then replaced, as any output file is)."""
    if not path.is_file():
        return {}
    try:
        return read_hardware(path, "--out")
    except InputError:
        return {}
