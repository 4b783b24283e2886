"""Every searcher option goes from its flag into run.json and into the searcher, of an --out run
and of its resume; each searcher's options are one frozen dataclass (search._options)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

import cli
import sweep._search_engine as engine
from cli._specs import options_from_args
from costmodel import InputError, cluster_preset, model_preset
from search import exact_space
from search._options import GradientOptions, GridOptions, MCMCOptions, PiperOptions, TPEOptions
from search._piper_input import load_piper_graph
from tests.sweep_helpers import rows

SMALL = ["--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "fixed", "--tp", "1,2,4,8", "--pp",
         "1,2,4,8,16", "--micro-batch", "1,2,4", "--recompute", "none,selective,full", "--zero-stage", "0,1"]

# Per options class: a value other than the default for every field, its flag, and how to read
# the value back from what the options build. A field missing here fails test_every_field_is_covered.
NON_DEFAULT = {
    MCMCOptions: {"chains": (3, "--chains", lambda s: s.chains), "beta": (7.5, "--beta", lambda s: s.beta),
                  "reset_every": (2, "--reset-every", lambda s: s.reset_every),
                  "memory_penalty": (0.0, "--memory-penalty", lambda s: s.memory_penalty),
                  "screen": (0, "--screen", lambda s: int(s.screen and s.points_fit is not None)),
                  "start_sample": (0.5, "--start-sample", lambda s: s.start_sample),
                  "polish": (0.25, "--polish", lambda s: s.polish)},
    TPEOptions: {"startup_trials": (3, "--startup-trials", lambda s: s._sampler_args["n_startup_trials"]),
                 "memory_penalty": (0.0, "--memory-penalty", lambda s: s.memory_penalty),
                 "local_share": (0.25, "--local-share", lambda s: s.local_share),
                 "start_sample": (0.5, "--start-sample", lambda s: s.start_sample),
                 "screen": (0, "--screen", lambda s: int(s.screen and s.points_fit is not None))},
    GradientOptions: {"samples": (5, "--samples", lambda s: s.samples), "lr": (0.25, "--lr", lambda s: s.lr),
                      "temperature": (2.0, "--temperature", lambda s: s.temperature),
                      "cooling": (0.9, "--cooling", lambda s: s.cooling),
                      "min_temperature": (0.5, "--min-temperature", lambda s: s.min_temperature),
                      "entropy": (0.02, "--entropy", lambda s: s.entropy),
                      "memory_penalty": (0.0, "--memory-penalty", lambda s: s.memory_penalty),
                      "restart": (0, "--restart", lambda s: s.restart),
                      "screen": (0, "--screen", lambda s: int(s.screen and s.points_fit is not None)),
                      "start_sample": (0.5, "--start-sample", lambda s: s.start_sample),
                      "polish": (0.25, "--polish", lambda s: s.polish)},
    GridOptions: {"start": (5, "--start", lambda s: s.start), "stop": (900, "--stop", lambda s: s.stop)},
    PiperOptions: {"devices": (3, "--devices", lambda g: g.max_devices),
                   "memory_bytes": (2.5e9, "--memory", lambda g: g.max_memory_bytes),
                   "microbatches": (7, "--microbatches", lambda g: g.microbatches),
                   "bandwidth_Bps": (1.25e10, "--bandwidth", lambda g: g.bandwidth_Bps)},
}


def _flags(cls) -> list[str]:
    return [w for _, (v, flag, _) in NON_DEFAULT[cls].items() for w in (flag, str(v))]


@pytest.mark.parametrize("cls", list(NON_DEFAULT))
def test_every_field_is_covered(cls):
    assert set(NON_DEFAULT[cls]) == {f.name for f in dataclasses.fields(cls)}
    default = cls()
    for name, (value, _, _) in NON_DEFAULT[cls].items():
        assert getattr(default, name) != value, f"{cls.__name__}.{name}: pick a value other than the default"


def _record_searchers(monkeypatch) -> list:
    built = []
    real = engine.make_searcher

    def recording(*a, **k):
        built.append(real(*a, **k))
        return built[-1]

    monkeypatch.setattr(engine, "make_searcher", recording)
    return built


@pytest.mark.parametrize("cls,kind", [(MCMCOptions, "mcmc"), (TPEOptions, "tpe"), (GradientOptions, "gradient")])
def test_options_reach_the_searcher_of_a_run_and_of_its_resume(cls, kind, tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "run")
    built = _record_searchers(monkeypatch)
    argv = ["search", kind, *SMALL, "--seed", "1", "--budget", "24", "--batch", "8", *_flags(cls), "--out", out,
            "--in-process", "--no-progress"]
    assert cli.main(argv) == 0
    with open(os.path.join(out, "run.json")) as f:
        recorded = json.load(f)["options"]
    for phase in ("run", "resume"):
        assert built, phase
        for name, (value, _, read) in NON_DEFAULT[cls].items():
            assert recorded[name] == value, name
            for searcher in built:
                assert read(searcher) == value, f"{phase}: {name}"
        built.clear()
        assert cli.main(["resume", out, "--in-process", "--no-progress"]) == 0


def test_grid_and_piper_options_reach_what_they_build():
    parser = cli.build_parser()
    args = parser.parse_args(["search", "grid", *SMALL, *_flags(GridOptions)])
    searcher = options_from_args(GridOptions, args).searcher(
        exact_space(model_preset("gpt3-175b"), cluster_preset("h100x1024")))
    for name, (value, _, read) in NON_DEFAULT[GridOptions].items():
        assert read(searcher) == value, name
    file = os.path.join(os.path.dirname(__file__), "data", "piper-inputs", "bert32a100.json")
    args = parser.parse_args(["search", "piper", file, *_flags(PiperOptions)])
    graph = options_from_args(PiperOptions, args).apply(load_piper_graph(file))
    for name, (value, _, read) in NON_DEFAULT[PiperOptions].items():
        assert read(graph) == value, name


def test_bad_option_names_its_flag():
    args = cli.build_parser().parse_args(["search", "mcmc", "--memory-penalty", "-1"])
    with pytest.raises(InputError) as err:
        options_from_args(MCMCOptions, args)
    assert err.value.argument == "--memory-penalty" and err.value.got == -1.0
    args = cli.build_parser().parse_args(["search", "tpe", "--startup-trials", "two"])
    with pytest.raises(InputError) as err:
        options_from_args(TPEOptions, args)
    assert err.value.argument == "--startup-trials"


def test_memory_penalty_zero_changes_an_mcmc_run(tmp_path):
    """Hard memory walls (0) and the default soft ones (0.1) walk different chains from one seed
    (without the memory screen, which leaves no wall in the walk)."""
    runs = {}
    for penalty in ("0", None):
        out = str(tmp_path / f"run{penalty}")
        extra = [] if penalty is None else ["--memory-penalty", penalty]
        argv = ["search", "mcmc", "--model", "gpt3-175b", "--cluster", "h100x1024", "--space", "exact", "--seed", "3",
                "--budget", "600", *extra, "--out", out, "--in-process", "--no-progress", "--top", "0",
                    "--screen", "0"]  # screened, the walk holds no out-of-memory point: no wall to price
        assert cli.main(argv) == 0
        with open(os.path.join(out, "run.json")) as f:
            assert json.load(f)["options"]["memory_penalty"] == (0.0 if penalty else 0.1)
        df = rows(out)
        runs[penalty] = set(map(tuple, df[["dp", "tp", "pp", "micro_batch", "schedule", "vpp", "recompute",
                                           "zero_stage"]].astype(str).values.tolist()))
    assert runs["0"] != runs[None]
