"""module_utils/memory_guard.py: what a profile's engine takes from a node, judged against MemAvailable; and the
preflight module that applies it on a node."""

import pytest
from ansible.module_utils.memory_guard import memory_plan, memory_verdict, read_meminfo
from ansible.modules import spark_memory

from tests.module_harness import run_module

SPARK = "MemTotal:       125000000 kB\nMemFree:         2000000 kB\nMemAvailable:   {available} kB\n"


def test_meminfo_fields_are_read_in_gib_and_other_lines_ignored():
    fields = read_meminfo("MemTotal:  1048576 kB\nHugePages_Total:  0\nMemAvailable:   524288 kB\nbogus\n")
    assert fields == {"MemTotal": 1.0, "MemAvailable": 0.5}


@pytest.mark.parametrize(
    ("profile", "plan"),
    [
        ({"platform": "gb10", "engine": {"gpu_memory_utilization": 0.7}}, (0.7, 0.0, 8.0)),
        ({"platform": "gb10", "engine": {}}, (0.92, 0.0, 8.0)),  # vLLM 0.33's own default (its catalog's)
        ({"platform": "gb10", "engine": {"gpu_memory_utilization": 0.8}, "memory_margin_gib": 12}, (0.8, 0.0, 12.0)),
        ({"platform": "cpu", "engine": {}, "env": {"VLLM_CPU_KVCACHE_SPACE": 1}}, (0.0, 1.0, 1.0)),
        ({"platform": "cpu", "engine": {}, "env": {}}, (0.0, 0.0, 1.0)),
    ],
)
def test_the_plan_follows_the_platform_and_the_profile(profile, plan):
    assert tuple(memory_plan(profile).values()) == plan


@pytest.mark.parametrize(
    ("available_kib", "problem"),
    [
        (120000000, ""),
        (
            80000000,
            "spark-b: 76.3 GiB of memory available (MemAvailable), the profile takes 91.4 GiB "
            "(gpu_memory_utilization 0.7 x 119.2 GiB + 8 GiB margin (memory_margin_gib))",
        ),
    ],
)
def test_available_memory_not_total_is_held_to_the_need(available_kib, problem):
    plan = memory_plan({"platform": "gb10", "engine": {"gpu_memory_utilization": 0.7}})
    available, need, found = memory_verdict("spark-b", SPARK.format(available=available_kib), plan)
    assert need == 91.4 and available == round(available_kib / 1048576, 1)
    assert found.startswith(problem) and bool(found) == bool(problem)


def test_a_node_whose_meminfo_shows_no_available_memory_is_a_problem_not_a_pass():
    _, _, problem = memory_verdict("node-1", "MemTotal: 1000 kB\n", memory_plan({"platform": "cpu"}))
    assert problem == "node-1: /proc/meminfo shows no MemTotal or MemAvailable, so its memory is unknown"


@pytest.mark.parametrize(
    ("profile", "refused"),
    [
        ({"platform": "cpu", "env": {"VLLM_CPU_KVCACHE_SPACE": 0}, "memory_margin_gib": 0}, False),
        ({"platform": "gb10", "engine": {"gpu_memory_utilization": 1.0}, "memory_margin_gib": 1}, True),
    ],
)
def test_the_preflight_module_reads_this_machines_meminfo_and_judges_it(profile, refused):
    """roles/spark_preflight/library/spark_memory.py as Ansible runs it: all of MemTotal plus 1 GiB is never
    available; nothing is."""
    result = run_module(spark_memory, dict(profile=profile, label="node-x", engine_project="spark-serve-unit-none"))
    assert result["engine_running"] is False and result["available_gib"] > 0
    assert bool(result["problem"]) == refused
    assert result["problem"].startswith("node-x: ") or not refused
