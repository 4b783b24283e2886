"""`plansweep bench`: strategies per second of the vectorised core vs the scalar reference."""

from __future__ import annotations

import time

import numpy as np

from cli import COMMAND_HELP, print_json
from cli._cmd_evaluate import add_framework_arg, add_seq_len_arg
from cli._specs import number, one_framework, with_seq_len
from costmodel import DEFAULT_FRAMEWORK, InputError, cluster_preset, evaluate, model_preset
from costmodel._bench_rows import BENCH_SPACE, bench_table
from costmodel._reference import evaluate_row


def measure(n_vec: int = 1_000_000, n_scalar: int = 2000, repeats: int = 3, model_name: str = "gpt3-175b",
            framework: str = DEFAULT_FRAMEWORK, seq_len=None) -> dict:
    model, cluster = model_preset(model_name), cluster_preset("h100x1024")
    if seq_len is not None:
        model = with_seq_len(model, seq_len)
    table = bench_table(n_vec, experts=model.experts)
    evaluate(model, cluster, table.take(slice(0, 1000)), framework=framework)  # warm-up
    best = min(_time(lambda: evaluate(model, cluster, table, framework=framework)) for _ in range(repeats))
    n_scalar = min(n_scalar, n_vec)  # the scalar reference prices a sample of the same rows
    sample = table.take(slice(0, n_scalar))
    rows = [sample.row(i) for i in range(n_scalar)]
    scalar = _time(lambda: [evaluate_row(model, cluster, r, framework=framework) for r in rows])
    vec_rate, scalar_rate = n_vec / best, n_scalar / scalar
    return {"strategies_per_s": vec_rate, "scalar_strategies_per_s": scalar_rate,
            "ratio": vec_rate / scalar_rate, "rows": n_vec, "framework": framework,
            "space": BENCH_SPACE if model_name == "gpt3-175b" else BENCH_SPACE.replace(
                "GPT-3 175B", model.name) + ", ep among the divisors of the experts up to 64"}


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


PIPELINE_CHECK_SPACES = (("gpt3-175b", "h100x1024", 1536), ("llama3-70b", "h100x256", 512),
                         ("megatron-22b", "a100x64", 1536))


def pipeline_check() -> list[dict]:
    """Closed-form vs simulated pipeline on `plansweep rank`'s default spaces."""
    from search import default_table

    out = []
    for name, cluster_name, batch in PIPELINE_CHECK_SPACES:
        model, cluster = model_preset(name), cluster_preset(cluster_name)
        table = default_table(model, cluster, batch)
        t0 = time.perf_counter()
        fast = evaluate(model, cluster, table)
        t1 = time.perf_counter()
        exact = evaluate(model, cluster, table, pipeline="simulate")
        t_fast, t_exact = t1 - t0, time.perf_counter() - t1
        ok = fast["feasible"] & exact["feasible"]
        rel = (fast["step_time_s"][ok] - exact["step_time_s"][ok]) / exact["step_time_s"][ok]
        out.append({"space": f"{name} on {cluster_name}, batch {batch}", "rows": len(table),
                    "feasible": int(ok.sum()), "min_rel_err": float(rel.min()), "max_rel_err": float(rel.max()),
                    "same_best": bool(np.argmin(fast["step_time_s"]) == np.argmin(exact["step_time_s"])),
                    "closed_form_s": t_fast, "simulate_s": t_exact})
    return out


# Rows the vectorised core prices at most in one bench: the table and its metrics take a few hundred bytes a row.
BENCH_ROWS_MAX = 10_000_000


def register(sub) -> None:
    p = sub.add_parser("bench", help=COMMAND_HELP["bench"])
    p.add_argument("--rows", metavar="N", default="1000000",
                   help="strategies the vectorised core prices (default 1000000, at most 10000000)")
    p.add_argument("--model", default="gpt3-175b",
                   help="preset of the rows (default gpt3-175b; an MoE preset adds an ep column, e.g. mixtral-8x7b)")
    add_seq_len_arg(p)
    add_framework_arg(p, "the framework profile the rows are priced under", many=False)
    p.add_argument("--json", action="store_true")
    p.add_argument("--pipeline-check", action="store_true",
                   help="instead: closed-form vs simulated pipeline time on rank's default spaces")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.pipeline_check:
        for r in pipeline_check():
            print(f"{r['space']}: {r['rows']:,} rows, {r['feasible']:,} feasible; closed form vs simulator "
                  f"{100 * r['min_rel_err']:+.2f}% .. {100 * r['max_rel_err']:+.2f}%; same best: {r['same_best']}; "
                  f"{r['closed_form_s']:.3f} s vs {r['simulate_s']:.3f} s")
        return 0
    rows = number(args.rows, "--rows", int, low=1)
    if rows > BENCH_ROWS_MAX:
        raise InputError("--rows", f"an integer in [1, {BENCH_ROWS_MAX:,}]", rows)
    res = measure(n_vec=rows, model_name=args.model,
                  framework=one_framework(args.framework), seq_len=args.seq_len)
    if args.json:
        print_json(({k: res[k] for k in ("strategies_per_s", "scalar_strategies_per_s", "ratio", "framework")}))
    else:
        print(f"space: {res['space']}; framework {res['framework']}")
        print(f"vectorised: {res['strategies_per_s']:,.0f} strategies/s ({res['rows']:,} rows, best of 3)")
        print(f"scalar reference: {res['scalar_strategies_per_s']:,.0f} strategies/s")
        print(f"ratio: {res['ratio']:,.0f}x")
    return 0
