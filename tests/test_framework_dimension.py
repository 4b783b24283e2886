"""Framework as a dimension: rows that carry their framework, one table priced under several profiles, spaces with a
framework dimension (and the searchers over them), --framework lists and `all` on the command line, rank's and
evaluate's frameworks side by side, --seq-len, and Parquet rows that carry their framework."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli import main
from cli._specs import framework_list, one_framework
from costmodel import (
    FRAMEWORKS,
    METRIC_COLUMNS,
    REASONS,
    InputError,
    StrategyTable,
    Transformer,
    cluster_preset,
    evaluate,
    hetero_preset,
    memory_screen,
    model_preset,
)
from costmodel._bench_rows import bench_table
from costmodel._evaluate import BLOCK_ROWS
from costmodel._feasibility import feasibility
from costmodel._strategy import FRAMEWORK_NAMES
from search import GradientSearcher, GridSearcher, HeteroSpace, MCMCSearcher, RandomSearcher, Space
from tests.searcher_contract import SearcherContract
from tests.test_search_tpe import TPEContract

GPT3, H100 = model_preset("gpt3-175b"), cluster_preset("h100x1024")
CODE = {name: i for i, name in enumerate(FRAMEWORK_NAMES)}


def _same(a, b) -> None:
    """Metrics equal column by column, exactly (infinities and all)."""
    for k in METRIC_COLUMNS:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---- the cost model: a table whose rows carry different frameworks -----------------------------------------------
def test_a_two_framework_table_prices_each_row_as_its_frameworks_own_call():
    # plansweep bench's rows (every schedule, ZeRO 0-3, fp8, ...) over several blocks, each row drawn generic or
    # fsdp2: every metric of every row equals the one-framework call's for that row, to the bit
    t = bench_table(2 * BLOCK_ROWS + 1000)
    codes = np.random.default_rng(3).choice([CODE["generic"], CODE["fsdp2"]], len(t)).astype(np.int8)
    mixed = evaluate(GPT3, H100, StrategyTable({**t.columns, "framework": codes}))
    for name in ("generic", "fsdp2"):
        rows = np.flatnonzero(codes == CODE[name])
        own = evaluate(GPT3, H100, t, framework=name)
        _same(mixed.take(rows), own.take(rows))
    # the exact pipeline simulator too, and the rows of three frameworks in one table: 90 rows, where each
    # framework's 30 hold all five schedules (the simulator's time is per distinct pipeline: about 4 s here
    # for 90 rows, 11 s for 300)
    few = t.take(np.arange(90))
    three = np.resize(np.array([CODE["megatron-core"], CODE["deepspeed"], CODE["fsdp2"]], dtype=np.int8), 90)
    assert all(len(np.unique(few["schedule"][three == CODE[name]])) == 5 for name in ("megatron-core", "deepspeed",
                                                                                        "fsdp2"))
    mixed = evaluate(GPT3, H100, StrategyTable({**few.columns, "framework": three}), pipeline="simulate")
    for name in ("megatron-core", "deepspeed", "fsdp2"):
        rows = np.flatnonzero(three == CODE[name])
        _same(mixed.take(rows), evaluate(GPT3, H100, few, pipeline="simulate", framework=name).take(rows))


def test_a_row_of_a_framework_lacking_its_schedule_is_infeasible_with_the_reason():
    # one interleaved row and one ZB-H1 row, each under three frameworks: Megatron-Core runs interleaved, not ZB-H1;
    # DeepSpeed's pipeline engine runs 1F1B only; generic runs both
    t = StrategyTable.from_columns(dp=8, tp=8, pp=16, micro_batch=1, global_batch=1536, recompute="full",
                                   sequence_parallel=True, zero_stage=1,
                                   schedule=["interleaved"] * 3 + ["zb-h1"] * 3, vpp=[3] * 3 + [1] * 3,
                                   framework=["megatron-core", "deepspeed", "generic"] * 2)
    reasons = [REASONS[r] for r in evaluate(GPT3, H100, t)["reason"]]
    assert reasons == ["ok", "framework_unsupported", "ok", "framework_unsupported", "framework_unsupported", "ok"]
    assert [REASONS[r] for r in feasibility(GPT3, H100, t)] == reasons
    m = evaluate(GPT3, H100, t)
    assert np.all(np.isinf(m["step_time_s"][~m["feasible"]])) and np.all(m["tokens_per_s"][~m["feasible"]] == 0)


def test_memory_screen_and_feasibility_read_each_rows_framework():
    t = bench_table(5000)
    codes = np.resize(np.array([CODE["megatron-core"], CODE["llm-foundry"], CODE["megatron-2021"]], dtype=np.int8),
                      len(t))
    mixed = StrategyTable({**t.columns, "framework": codes})
    mem, reason = memory_screen(GPT3, H100, mixed)
    feas = feasibility(GPT3, H100, mixed)
    for name in ("megatron-core", "llm-foundry", "megatron-2021"):
        rows = np.flatnonzero(codes == CODE[name])
        m1, r1 = memory_screen(GPT3, H100, t, name)
        np.testing.assert_array_equal(mem[rows], m1[rows])
        np.testing.assert_array_equal(reason[rows], r1[rows])
        np.testing.assert_array_equal(feas[rows], feasibility(GPT3, H100, t, name)[rows])


def test_the_framework_argument_must_be_the_rows_own():
    t = StrategyTable.from_columns(dp=8, tp=8, pp=16, global_batch=1536, framework=["fsdp2", "fsdp2"])
    _same(evaluate(GPT3, H100, t, framework="torchtitan"), evaluate(GPT3, H100, t))  # (an alias of fsdp2)
    with pytest.raises(InputError) as e:
        evaluate(GPT3, H100, t, framework="megatron-core")
    assert e.value.argument == "framework" and e.value.got == "fsdp2"


def test_the_framework_column_reads_names_aliases_and_codes():
    t = StrategyTable.from_columns(dp=8, tp=8, pp=16, global_batch=1536,
                                   framework=["mcore", "torchtitan", "MEGATRON-DEEPSPEED", "generic"])
    assert t.readable()["framework"].tolist() == ["megatron-core", "fsdp2", "deepspeed", "generic"]
    assert t.row(1)["framework"] == "fsdp2"
    codes = StrategyTable.from_columns(dp=8, global_batch=8, framework=[CODE["fsdp2"], 0])
    assert codes.readable()["framework"].tolist() == ["fsdp2", "generic"]
    assert "framework" not in StrategyTable.from_columns(dp=8, global_batch=8).columns  # optional: absent
    for bad in ("megatron-9", "", len(FRAMEWORK_NAMES), -1):
        with pytest.raises(InputError) as e:
            StrategyTable.from_columns(dp=8, global_batch=8, framework=[bad])
        assert e.value.argument == "framework"
    damaged = StrategyTable({**t.columns, "framework": np.array([0, 1, 99, 2], dtype=np.int8)})  # (read from disk)
    with pytest.raises(InputError) as e:
        evaluate(GPT3, H100, damaged)
    assert e.value.argument == "framework" and e.value.got == 99
    with pytest.raises(ValueError, match="framework column in some tables only"):
        StrategyTable.concat([t, StrategyTable.from_columns(dp=8, tp=8, pp=16, global_batch=1536)])


# ---- spaces with a framework dimension --------------------------------------------------------------------------
SMALL = Transformer(name="small", layers=16, hidden=1024, heads=16, kv_heads=8, seq_len=2048, vocab=32000)
C32 = cluster_preset("h100x32")


def small_space(frameworks=("megatron-core", "deepspeed", "fsdp2"), **kw) -> Space:
    opts = dict(tp=[1, 2, 4, 8], pp=[1, 2, 4], micro_batch=[1, 2], schedule=["gpipe", "1f1b", "interleaved"],
                vpp=[1, 2], recompute=["none", "full"], zero_stage=[0, 1, 3], sequence_parallel=[False, True])
    opts.update(kw)
    return Space.from_options(SMALL, C32, global_batch=64, base="fixed", framework=list(frameworks), **opts)


def test_a_space_over_frameworks_is_the_union_of_each_frameworks_space():
    space = small_space()
    assert space.frameworks == ("megatron-core", "deepspeed", "fsdp2") and space.framework is None
    assert space.dims[0].name == "framework"  # first in the digit order: a grid unit holds mostly one framework
    _, t = space.rows(0, space.size)
    got = t.readable()
    total = 0
    for name in space.frameworks:
        one = small_space((name,))
        assert one.framework == name and one.frameworks == (name,)
        _, t1 = one.rows(0, one.size)
        mine = got["framework"] == name
        assert int(mine.sum()) == len(t1) == one.valid_count()  # the same rows, framework by framework
        for col in ("tp", "pp", "micro_batch", "schedule", "vpp", "recompute", "zero_stage", "sequence_parallel"):
            np.testing.assert_array_equal(got[col][mine], t1.readable()[col])
        total += len(t1)
    assert len(t) == total == space.valid_count()
    # what each framework runs: DeepSpeed 1F1B with ZeRO <= 1 under a pipeline; fsdp2 GPipe and ZeRO-3 with pp > 1
    ds = got["framework"] == "deepspeed"
    assert set(got["schedule"][ds]) == {"1f1b"}
    fsdp = got["framework"] == "fsdp2"
    assert np.any(fsdp & (got["schedule"] == "gpipe")) and np.any(fsdp & (t["zero_stage"] == 3) & (t["pp"] > 1))
    assert not np.any(~fsdp & (got["schedule"] == "gpipe"))


def test_a_space_records_its_frameworks_and_reads_a_space_written_before():
    one = Space.from_options(SMALL, C32, global_batch=64)
    assert one.to_json()["fixed"]["framework"] == "megatron-core"  # recorded, though it is the default
    many = small_space()
    d = many.to_json()
    assert d["dims"][0] == {"name": "framework", "choices": ["megatron-core", "deepspeed", "fsdp2"], "ordinal": False}
    assert Space.from_json(d, SMALL, C32) == many
    legacy = {k: v for k, v in one.to_json().items()}
    legacy["fixed"] = {k: v for k, v in legacy["fixed"].items() if k != "framework"}
    assert Space.from_json(legacy, SMALL, C32).framework == "generic"  # what such a space was priced under
    with pytest.raises(InputError, match="framework"):
        Space.from_options(SMALL, C32, global_batch=64, framework=["megatron-core", "no-such-framework"])
    placed = HeteroSpace.from_options(GPT3, hetero_preset("a100x64+h100x64"), global_batch=1536,
                                      framework=["mcore", "fsdp2"])
    assert placed.frameworks == ("megatron-core", "fsdp2")
    assert HeteroSpace.from_json(placed.to_json(), GPT3, placed.cluster) == placed
    single = HeteroSpace.from_options(GPT3, hetero_preset("a100x64+h100x64"), global_batch=1536)
    assert single.to_json()["framework"] == "megatron-core"


@pytest.fixture(scope="module")
def fw_space():
    return small_space()


class TestGridFrameworkContract(SearcherContract):
    @pytest.fixture
    def space(self, fw_space):
        return fw_space

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: GridSearcher(space, start=300 * seed, chunk=512)


class TestRandomFrameworkContract(SearcherContract):
    @pytest.fixture
    def space(self, fw_space):
        return fw_space

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: RandomSearcher(space, seed)


class TestMCMCFrameworkContract(SearcherContract):
    @pytest.fixture
    def space(self, fw_space):
        return fw_space

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: MCMCSearcher(space, seed=seed, chains=16)


class TestTPEFrameworkContract(TPEContract):
    @pytest.fixture
    def space(self, fw_space):
        return fw_space


class TestGradientFrameworkContract(SearcherContract):
    @pytest.fixture
    def space(self, fw_space):
        return fw_space

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: GradientSearcher(space, seed=seed, samples=16)


class TestMCMCPlacementFrameworkContract(SearcherContract):
    @pytest.fixture(scope="class")
    def space(self):
        return HeteroSpace.from_options(GPT3, hetero_preset("a100x64+h100x64"), global_batch=1536, pp=(2, 4),
                                        dp=(2, 4, 8), tp=(4, 8), microbatches=(64, 128), schedule=("1f1b", "gpipe"),
                                        recompute=("selective", "full"), zero_stage=(1,),
                                        framework=["megatron-core", "fsdp2"])

    @pytest.fixture
    def make_searcher(self, space):
        return lambda seed: MCMCSearcher(space, seed=seed, chains=16, starts=(*space.start_points(), "random"))


def test_searchers_visit_every_framework_of_the_space(fw_space):
    # a random search and an MCMC walk over the framework dimension: rows of each framework are asked and priced
    seen = {}
    for searcher in (RandomSearcher(fw_space, 0), MCMCSearcher(fw_space, seed=0, chains=32)):
        for _ in range(6):
            t = searcher.ask(32)
            searcher.tell(t, evaluate(fw_space.model, fw_space.cluster, t))
            for name in t.readable()["framework"]:
                seen[name] = seen.get(name, 0) + 1
    assert set(seen) == set(fw_space.frameworks)


# ---- the command line -------------------------------------------------------------------------------------------
def test_framework_lists_and_all():
    assert framework_list(None) == ["megatron-core"]
    assert framework_list("mcore, torchtitan,megatron-core") == ["megatron-core", "fsdp2"]  # aliases, once each
    assert framework_list("all") == framework_list("ALL") == list(FRAMEWORKS)
    assert one_framework("megatron-deepspeed") == "deepspeed" and one_framework(None) == "megatron-core"
    for bad in ("", "megatron-core,", "megatron-core,nope", "all,generic"):
        with pytest.raises(InputError) as e:
            framework_list(bad)
        assert e.value.argument == "--framework"
    for bad in ("generic,fsdp2", "all", "nope"):
        with pytest.raises(InputError) as e:
            one_framework(bad)
        assert e.value.argument == "--framework"


@pytest.mark.parametrize("command", [
    ["evaluate", "--framework", "megatron-core,nope"],
    ["rank", "--framework", "generic,,fsdp2"],
    ["sweep", "--framework", "nope", "--out", "/nonexistent/never-written"],
    ["search", "mcmc", "--framework", "all,nope"],
    ["bench", "--rows", "10", "--framework", "generic,fsdp2"],
    ["replan", "--framework", "all"],
    ["export", "--framework", "megatron,torchtitan"],
    ["validate", "narayanan2021-table1", "--framework", "generic,fsdp2"],
])
def test_a_bad_framework_word_is_one_line_naming_the_flag(command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--framework" in err and "Traceback" not in err


def test_evaluate_prices_the_strategy_under_each_framework_side_by_side(capsys):
    plan = ["--tp", "8", "--pp", "16", "--schedule", "interleaved", "--vpp", "3", "--micro-batch", "1",
            "--recompute", "selective", "--sequence-parallel", "--zero-stage", "0"]  # (ZeRO-0: FSDP has no ZeRO-1)
    assert main(["evaluate", *plan, "--framework", "megatron-core,fsdp2,deepspeed,generic", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    entries = {e["framework"]: e for e in out["frameworks"]}
    assert list(entries) == ["megatron-core", "fsdp2", "deepspeed", "generic"]
    assert entries["deepspeed"]["reason"] == "framework_unsupported"
    assert "interleaved" in entries["deepspeed"]["refused"]
    for name in ("megatron-core", "fsdp2", "generic"):  # each framework's entry is its own one-framework evaluate
        assert main(["evaluate", *plan, "--framework", name, "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert entries[name]["metrics"] == alone["metrics"] and entries[name]["stages"] == alone["stages"]
    fastest = max(("megatron-core", "fsdp2", "generic"), key=lambda n: entries[n]["metrics"]["tokens_per_s"])
    assert out["fastest"] == fastest
    assert main(["evaluate", *plan, "--framework", "megatron-core,fsdp2,deepspeed,generic"]) == 0
    text = capsys.readouterr().out
    assert f"fastest: {fastest}," in text and "deepspeed: schedule: expected one of 1f1b" in text
    # a strategy no framework of the list runs: the first refusal, one line
    assert main(["evaluate", *plan, "--framework", "deepspeed,megatron-2021", "--zero-stage", "3"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _rank_blocks(text: str) -> dict[str, float]:
    """tokens/s of each framework's line in rank's or show's 'best plan per framework' block (its rows: rank,
    framework, the strategy, step s, tokens/s, ±% where the run has error bands, MFU, mem GB)."""
    out, at = {}, -3
    for line in text.split("best plan per framework:")[1].splitlines():
        cells = line.split()
        if line.startswith("winner:"):
            break
        if "±%" in cells:  # the header: the error band's column sits between tokens/s and MFU
            at = -4
        if cells and cells[0].isdigit():
            out[cells[1]] = float(cells[at].replace(",", ""))
    return out


def test_rank_prints_the_best_plan_of_each_framework_and_names_the_winner(capsys, tmp_path):
    model = tmp_path / "small.json"
    model.write_text(json.dumps({"name": "small", "layers": 16, "hidden": 1024, "heads": 16, "kv_heads": 8,
                                 "seq_len": 2048, "vocab": 32000}))
    space = ["--model", str(model), "--cluster", "h100x32", "--space", "fixed", "--global-batch", "64",
             "--tp", "1,2,4,8", "--pp", "1,2,4", "--micro-batch", "1,2", "--schedule", "gpipe,1f1b,interleaved",
             "--vpp", "1,2", "--recompute", "none,full", "--zero-stage", "0,1,3", "--sequence-parallel", "false,true"]
    names = ["megatron-core", "deepspeed", "fsdp2"]
    alone = {}
    for name in names:  # each framework ranked on its own: its best plan's tokens/s
        assert main(["rank", *space, "--framework", name, "--top", "1"]) == 0
        head, line = capsys.readouterr().out.splitlines()[1:3]
        assert head.split()[-5:] == ["tokens/s", "±%", "MFU", "mem", "GB"]
        alone[name] = float(line.split()[-4].replace(",", ""))
    assert main(["rank", *space, "--framework", ",".join(names), "--top", "3"]) == 0
    out = capsys.readouterr().out
    blocks = _rank_blocks(out)
    assert blocks == alone  # the same best plan per framework as ranking each alone
    winner = max(alone, key=alone.get)
    assert f"winner: {winner}," in out
    assert list(blocks) == sorted(alone, key=lambda n: -alone[n])  # best first
    # and why it wins: its step against the next framework's, the steps as the block prints them
    block = out.split("best plan per framework:")[1].splitlines()
    rows = [ln.split() for ln in block if ln.split()[:1] in (["1"], ["2"])]
    why = next(ln for ln in out.splitlines() if ln.startswith("why: "))
    said = why.split(":")[1].split()  # "a step of X s against Y s"
    step = {r[0]: float(r[-5]) for r in rows}  # (the block's step s column, 4 decimals)
    assert float(said[3]) == pytest.approx(step["1"], abs=1e-4) and float(said[6]) == pytest.approx(step["2"], abs=1e-4)


def test_rank_json_gives_the_rows_the_frameworks_and_the_winner_the_text_prints(capsys, tmp_path):
    """rank --json: one JSON object with the counts, the best rows (tokens/s as the text prints them, fastest first),
    each row's goodput columns and memory against its GPU, the best row of each framework and the winner."""
    model = tmp_path / "small.json"
    model.write_text(json.dumps({"name": "small", "layers": 16, "hidden": 1024, "heads": 16, "kv_heads": 8,
                                 "seq_len": 2048, "vocab": 32000}))
    space = ["--model", str(model), "--cluster", "h100x32", "--space", "fixed", "--global-batch", "64",
             "--tp", "1,2,4", "--pp", "1,2", "--micro-batch", "1,2", "--schedule", "1f1b", "--recompute", "none,full",
             "--zero-stage", "1,3", "--framework", "megatron-core-deepep-a2a-overlap,fsdp2", "--top", "3"]
    assert main(["rank", *space]) == 0
    text = capsys.readouterr().out
    assert main(["rank", *space, "--json", "--sensitivity", "compute=1.0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sensitivity"] == [{"case": "compute x1", "best_rank": 1, "best_fits": True, "first_behind": 0.0}]
    count = text.splitlines()[0].split(": ")[1]  # "N strategies, F feasible (infeasible: ...)"
    assert count.startswith(f"{doc['num_strategies']:,} strategies, {doc['num_feasible']:,} feasible")
    assert doc["num_strategies"] == doc["num_feasible"] + sum(doc["infeasible_reasons"].values())
    assert len(doc["rows"]) == 3
    printed = [float(ln.split()[-4].replace(",", "").rstrip("~")) for ln in text.splitlines()[2:5]]
    assert [round(r["tokens_per_s"]) for r in doc["rows"]] == printed
    steps = [r["step_time_s"] for r in doc["rows"]]
    assert steps == sorted(steps)
    for r in doc["rows"]:
        # goodput is throughput times its useful share; memory held to one H100 (85.5e9 bytes), tight past 1/1.1
        assert r["goodput_tokens_per_s"] == pytest.approx(r["tokens_per_s"] * r["goodput_ratio"], rel=1e-9)
        assert r["memory"]["device_bytes"] == pytest.approx(81_559 * 2**20, rel=1e-3)
        assert r["memory"]["tight"] == (r["mem_total_bytes"] * 1.1 > r["memory"]["device_bytes"])
    # the long framework names whole in the text's side-by-side block, and the same winner in both
    block = text.split("best plan per framework:")[1]
    assert "megatron-core-deepep-a2a-overlap " in block
    assert f"winner: {doc['winner']}," in text
    bests = {r["framework"]: r["tokens_per_s"] for r in doc["best_per_framework"]}
    assert set(bests) == {"megatron-core-deepep-a2a-overlap", "fsdp2"} and doc["frameworks_without_plan"] == {}
    assert doc["winner"] == max(bests, key=bests.get)
    assert {round(v) for v in bests.values()} == {round(v) for v in _rank_blocks(text).values()}


def test_why_names_the_parts_of_the_step_that_differ_most():
    """why_faster by hand: plan a's step of 10 s against b's 12 s, the parts summing to each; parts within 1% of
    b's step (0.12 s) left out, the rest largest first, signed a - b."""
    from cli._cmd_show import STEP_PARTS, why_faster

    zero = {key: 0.0 for key, _ in STEP_PARTS}
    a = {**zero, "compute_s": 7.0, "dp_comm_s": 0.5, "tp_comm_s": 1.95, "bubble_s": 0.55, "step_time_s": 10.0}
    b = {**zero, "compute_s": 7.1, "dp_comm_s": 2.0, "tp_comm_s": 1.5, "bubble_s": 1.4, "step_time_s": 12.0}
    assert why_faster(a, b) == ("why: a step of 10 s against 12 s: data-parallel exchange -1.5 s, "
                                "pipeline bubble -0.85 s, tensor-parallel exchange +0.45 s")
    assert why_faster(a, b, most=1).endswith("data-parallel exchange -1.5 s")
    assert why_faster(a, {**b, "optimizer_s": None}) is None  # a part missing: nothing said


# ---- --seq-len --------------------------------------------------------------------------------------------------
def test_seq_len_replaces_the_models_sequence_length(capsys, tmp_path):
    plan = ["--tp", "8", "--pp", "8", "--micro-batch", "1", "--recompute", "selective", "--sequence-parallel",
            "--zero-stage", "1", "--global-batch", "512", "--json"]
    assert main(["evaluate", "--model", "gpt3-175b", "--seq-len", "4096", *plan]) == 0
    got = json.loads(capsys.readouterr().out)
    # the same model written out with seq_len 4096: the same answer, field for field
    import dataclasses

    spec = {k: v for k, v in dataclasses.asdict(GPT3).items() if v is not None}
    spec["seq_len"] = 4096
    (tmp_path / "gpt3-4k.json").write_text(json.dumps(spec))
    assert main(["evaluate", "--model", str(tmp_path / "gpt3-4k.json"), *plan]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == got["metrics"]
    m = got["metrics"]
    # tokens per second: 512 sequences of 4,096 tokens an iteration
    assert m["tokens_per_s"] == pytest.approx(512 * 4096 / m["step_time_s"], rel=1e-12)
    assert main(["evaluate", "--model", "gpt3-175b", *plan]) == 0  # (2,048 tokens without the flag)
    m0 = json.loads(capsys.readouterr().out)["metrics"]
    assert m0["tokens_per_s"] == pytest.approx(512 * 2048 / m0["step_time_s"], rel=1e-12)
    assert m["mem_activations_bytes"] > m0["mem_activations_bytes"]


@pytest.mark.parametrize("word", ["0", "-4", "4k", "2.5"])
def test_seq_len_is_an_integer_of_at_least_one(word, capsys):
    assert main(["evaluate", "--seq-len", word, "--tp", "8", "--pp", "8"]) == 2
    assert "--seq-len: expected an integer" in capsys.readouterr().err


def test_seq_len_meets_the_usual_feasibility(capsys):
    # 2 cp must divide the sequence: 4,098 tokens over cp 4 does not
    assert main(["evaluate", "--seq-len", "4098", "--tp", "8", "--pp", "8", "--cp", "4"]) == 2
    assert "cp: expected 2*cp dividing seq_len=4098, got 4" in capsys.readouterr().err
    assert main(["evaluate", "--model", "mlp-64x8192", "--seq-len", "8", "--tp", "8"]) == 2
    assert "--seq-len: expected a transformer model" in capsys.readouterr().err
    for command in (["rank", "--space", "exact"], ["sweep", "--out", "x"], ["search", "random"], ["replan"],
                    ["export", "--framework", "megatron"], ["bench", "--rows", "10"]):
        assert main([*command, "--seq-len", "0"]) == 2, command
        assert "--seq-len: expected an integer >= 1, got 0" in capsys.readouterr().err


# ---- runs: rows carry their framework ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fw_run(tmp_path_factory):
    """A sweep over two frameworks of a small space, in this process (no Ray)."""
    out = tmp_path_factory.mktemp("run") / "fw"
    assert main(["sweep", "--model", "llama3-8b", "--cluster", "h100x32", "--space", "fixed", "--global-batch", "64",
                 "--tp", "2,4,8", "--pp", "1,2,4", "--schedule", "1f1b,interleaved,gpipe", "--vpp", "1,2",
                 "--zero-stage", "0,3", "--recompute", "selective,full", "--sequence-parallel", "true",
                 "--framework", "megatron-core,fsdp2",
                 "--out", str(out), "--in-process", "--no-progress", "--top", "3", "--keep", "all"]) == 0
    return out


def test_parquet_rows_carry_the_framework_they_were_priced_under(fw_run):
    import pyarrow.parquet as pq

    from cli._specs import strategy_from_mapping
    from sweep._results import STRATEGY_COLUMNS

    rows = pq.read_table(fw_run / "results").to_pylist()
    assert {r["framework"] for r in rows} == {"megatron-core", "fsdp2"}
    assert all(r["framework"] == "fsdp2" for r in rows if r["schedule"] == "gpipe")  # megatron-core has no GPipe
    model, cluster = model_preset("llama3-8b"), cluster_preset("h100x32")
    sample = rows[:: max(1, len(rows) // 40)]
    for r in sample:  # each row re-priced alone under the framework it names: the same throughput and memory
        t = strategy_from_mapping({k: r[k] for k in STRATEGY_COLUMNS if r.get(k) is not None}, "row")
        m = evaluate(model, cluster, t, framework=r["framework"])
        assert m["tokens_per_s"][0] == pytest.approx(r["tokens_per_s"], rel=1e-12)
        assert m["mem_total_bytes"][0] == pytest.approx(r["mem_total_bytes"], rel=1e-12)
        assert REASONS[m["reason"][0]] == r["reason"]


def test_show_gives_the_best_of_each_framework(fw_run, capsys):
    assert main(["show", str(fw_run), "--json"]) == 0
    study = json.loads(capsys.readouterr().out)["studies"][0]
    best = {r["framework"]: r["tokens_per_s"] for r in study["best_per_framework"]}
    assert set(best) == {"megatron-core", "fsdp2"} and study["frameworks_without_plan"] == {}
    import pyarrow.parquet as pq

    rows = pq.read_table(fw_run / "results").to_pylist()
    for name, value in best.items():  # the highest feasible tokens/s among the framework's rows
        assert value == max(r["tokens_per_s"] for r in rows if r["framework"] == name and r["feasible"])
    assert main(["show", str(fw_run)]) == 0
    text = capsys.readouterr().out
    assert _rank_blocks(text) == {k: round(v) for k, v in best.items()}  # (printed to the token)
    assert f"winner: {max(best, key=best.get)}," in text


def test_export_takes_the_best_row_its_launch_target_runs(fw_run, capsys):
    # each launch target writes its own framework's best row, read back whole from the written text
    import pyarrow.parquet as pq

    from cli._export import canonical_plan, read_back
    from sweep._results import STRATEGY_COLUMNS

    model = model_preset("llama3-8b")
    rows = [r for r in pq.read_table(fw_run / "results").to_pylist() if r["feasible"]]
    plans = {}
    for target, name in (("torchtitan", "fsdp2"), ("megatron", "megatron-core")):
        assert main(["export", "--run", str(fw_run), "--framework", target]) == 0
        text = capsys.readouterr().out
        best = max((r for r in rows if r["framework"] == name), key=lambda r: r["tokens_per_s"])
        want = canonical_plan({k: best[k] for k in STRATEGY_COLUMNS if best.get(k) is not None}, model)
        plans[name] = read_back(target, text, model)
        assert plans[name] == want
    # (under the current cost model both frameworks' best plans of this space are the same plan, tp 2 ZeRO 3: the
    # choice by framework is what the equalities above hold; which framework's rows a target reads: the next test)


def test_export_of_a_run_without_its_targets_rows_prices_the_best_under_the_target(tmp_path, capsys):
    out = tmp_path / "generic"
    assert main(["sweep", "--model", "llama3-8b", "--cluster", "h100x32", "--space", "fixed", "--global-batch", "64",
                 "--tp", "4,8", "--pp", "1,2", "--zero-stage", "0", "--sequence-parallel", "true", "--framework",
                 "generic", "--out", str(out), "--in-process", "--no-progress", "--top", "0"]) == 0
    capsys.readouterr()
    assert main(["export", "--run", str(out), "--framework", "megatron"]) == 0
    captured = capsys.readouterr()
    assert "no row of the run is priced under a framework launched as megatron-core" in captured.err
    assert "--tensor-model-parallel-size" in captured.out


def test_a_run_of_an_older_cost_model_is_refused_in_one_line(fw_run, tmp_path, capsys):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(fw_run, old)
    info = json.loads((old / "run.json").read_text())
    info["versions"]["cost_model"] = "3"  # written when a command naming no framework priced generic's
    (old / "run.json").write_text(json.dumps(info))
    assert main(["resume", str(old), "--in-process", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cost model version '3'" in err
