"""Re-planning after lost nodes: the policies by hand and their ordering."""

import pytest

from costmodel import InputError, cluster_preset, model_preset
from search._replan import replan, smaller_cluster

PLAN = dict(dp=16, tp=8, pp=8, cp=1, micro_batch=1, global_batch=1536, vpp=1, schedule="1f1b",
            recompute="selective", sequence_parallel=True, zero_stage=1, precision="bf16", overlap_dp=True)


@pytest.fixture(scope="module")
def records():
    return replan(model_preset("gpt3-175b"), cluster_preset("h100x1024"), PLAN, [0, 1, 4], framework="generic")


def test_shrink_dp_by_hand(records):
    by = {(r["nodes_lost"], r["policy"]): r for r in records}
    # nothing lost: the plan itself
    r0 = by[(0, "shrink-dp")]
    assert r0["plan"]["dp"] == 16 and r0["kept"] == pytest.approx(1.0, rel=1e-12)
    # one node lost (1016 GPUs): dp <= 1016 / 64 = 15, and 1536 / (dp x 1) whole: 15, 14, 13 no, 12
    r1 = by[(1, "shrink-dp")]
    assert r1["gpus_left"] == 1016
    assert {k: r1["plan"][k] for k in ("dp", "tp", "pp", "micro_batch", "recompute")} == {
        "dp": 12, "tp": 8, "pp": 8, "micro_batch": 1, "recompute": "selective"}
    assert r1["gpus_used"] == 768
    # four nodes lost (992): dp <= 15 again, so the same plan
    assert by[(4, "shrink-dp")]["plan"]["dp"] == 12


def test_policies_keep_what_they_promise_and_order(records):
    for k in (0, 1, 4):
        rows = {r["policy"]: r for r in records if r["nodes_lost"] == k}
        keep = rows["keep-tp-pp"]["plan"]
        assert (keep["tp"], keep["pp"], keep["cp"]) == (8, 8, 1)
        for r in rows.values():
            assert r["gpus_used"] <= r["gpus_left"]
        # each policy's candidates include the previous one's: never worse
        assert rows["keep-tp-pp"]["tokens_per_s"] >= rows["shrink-dp"]["tokens_per_s"]
        assert rows["re-layout"]["tokens_per_s"] >= rows["keep-tp-pp"]["tokens_per_s"]


def test_bad_requests_are_refused():
    model, cluster = model_preset("gpt3-175b"), cluster_preset("h100x1024")
    with pytest.raises(InputError, match="policy: expected one of shrink-dp"):
        replan(model, cluster, PLAN, [1], policies=["panic"])
    with pytest.raises(InputError, match="nodes lost: expected fewer than the cluster's 128 nodes"):
        smaller_cluster(cluster, 128)
    with pytest.raises(InputError, match="plan: expected a feasible plan"):
        replan(model, cluster, {**PLAN, "tp": 7}, [1])
