"""An engine option a profile leaves out takes the engine's own default, read from the flag catalog of the profile's
engine_version (docs/engine-facts.md section 8): the allocator fraction, the memory the guard asks of a node and the
parallel layout run on the value the engine claims, never on a figure copied into the code."""

import pytest
from ansible.module_utils import vllm_flags_0_30_0, vllm_flags_0_33_0
from ansible.module_utils.engine_env import parse_allocator_conf
from ansible.module_utils.engine_rules import plan
from ansible.module_utils.memory_guard import memory_plan
from ansible.module_utils.vllm_catalogs import nearest_catalog

from tests.profiles import profile, profiles, vllm_args_params

UTIL = "gpu_memory_utilization"


def engine_default(prof, dest):
    return nearest_catalog(prof["engine_version"])["FLAGS"][dest]["default"]


def without(name, dest):
    prof = profile(name)
    prof["engine"].pop(dest, None)
    return prof


def fraction(result):
    return float(parse_allocator_conf(result["env"]["PYTORCH_ALLOC_CONF"])["per_process_memory_fraction"])


@pytest.mark.parametrize("name", sorted(profiles()))
def test_each_shipped_profile_without_the_utilization_runs_on_its_engines_default(name):
    """Every shipped profile, as shipped where it leaves gpu_memory_utilization out (the test-bed ones), else with it
    dropped: a GPU's allocator fraction and memory need follow the catalog's default; the CPU build sizes its KV
    cache by VLLM_CPU_KVCACHE_SPACE instead (the engine tier reads the parser's value for the test-bed argv)."""
    prof = without(name, UTIL)
    result = plan(vllm_args_params(prof))
    assert result["violations"] == []
    assert "--gpu-memory-utilization" not in result["argv"]
    if prof["platform"] == "cpu":
        assert "PYTORCH_ALLOC_CONF" not in result["env"] and memory_plan(prof)["share"] == 0.0
    else:
        assert fraction(result) == memory_plan(prof)["share"] == engine_default(prof, UTIL)


@pytest.mark.parametrize(
    ("catalog", "name", "follows"),
    [
        (vllm_flags_0_30_0, "pair", True),  # 0.30.1rc1.dev648 renders with the 0.30 catalog
        (vllm_flags_0_30_0, "single", False),  # 0.33.0: another catalog's default is not its engine's
        (vllm_flags_0_33_0, "single", True),
    ],
)
def test_the_default_comes_from_the_catalog_of_the_profiles_version(monkeypatch, catalog, name, follows):
    monkeypatch.setitem(catalog.FLAGS, UTIL, {**catalog.FLAGS[UTIL], "default": 0.5})
    prof = without(name, UTIL)
    assert fraction(plan(vllm_args_params(prof))) == memory_plan(prof)["share"] == engine_default(prof, UTIL)
    assert (engine_default(prof, UTIL) == 0.5) == follows


@pytest.mark.parametrize(
    ("name", "catalog", "dest", "rules"),
    [
        ("single", vllm_flags_0_33_0, "data_parallel_size", ["layout-equals-ranks", "data-parallel-replicas"]),
        ("single", vllm_flags_0_33_0, "pipeline_parallel_size", ["layout-equals-ranks", "pp-per-layer-embeddings"]),
        # pair without its TP 2: the layout and the MoE table's name (N=640/TP) count the catalog's 2, so nothing
        ("pair", vllm_flags_0_30_0, "tensor_parallel_size", []),
    ],
)
def test_the_parallel_rules_count_a_size_left_out_at_the_catalogs_default(monkeypatch, name, catalog, dest, rules):
    """A catalog whose default were 2 is what the rules count, so they read it rather than assume 1."""
    monkeypatch.setitem(catalog.FLAGS, dest, {**catalog.FLAGS[dest], "default": 2})
    result = plan(vllm_args_params(without(name, dest)))
    assert [v["rule"] for v in result["violations"]] == rules
