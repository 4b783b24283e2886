"""cluster.yaml is a Ray cluster-launcher file that Ray's own validation accepts."""

from __future__ import annotations

import copy
import os
import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_ray_validates_cluster_yaml(config):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(copy.deepcopy(config))  # the JSON schema (ray-schema.json) and node types
    prepared = prepare_config(copy.deepcopy(config))  # what `ray up` does before launching
    validate_config(prepared)
    assert prepared["head_node_type"] in prepared["available_node_types"]
    worker = prepared["available_node_types"]["worker"]
    assert worker["max_workers"] >= 1 and worker["min_workers"] == 0


def test_ray_rejects_a_broken_copy(config):
    # The validation is real: a node type the head refers to must exist.
    import jsonschema
    from ray.autoscaler._private.util import validate_config

    broken = copy.deepcopy(config)
    broken["head_node_type"] = "no-such-type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(broken)
    broken = copy.deepcopy(config)
    broken["setup_commands"] = "pip install -e ~/plansweep"  # the schema wants a list of commands
    with pytest.raises(jsonschema.ValidationError):
        validate_config(broken)


def test_every_node_installs_this_checkout(config):
    mounts = config["file_mounts"]
    remote = next(r for r, local in mounts.items() if os.path.normpath(local) == ".")
    setup = " ; ".join(config["setup_commands"])  # run on head and workers alike
    assert f"pip install -e {remote}" in setup
    import ray

    assert f'"ray[default]=={ray.__version__}"' in setup  # the cluster runs the driver's Ray
    assert any("ray start --head" in c for c in config["head_start_ray_commands"])
    assert any("--address=$RAY_HEAD_IP:6379" in c for c in config["worker_start_ray_commands"])
