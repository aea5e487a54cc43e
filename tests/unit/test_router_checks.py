"""roles/vllm_router's refusals (module_utils/router_checks.py, module vllm_router_check): every problem with the
router's options at once, each naming the option, the value and the rule."""

import pytest
from ansible.module_utils.router_checks import POLICIES, router_problems
from ansible.modules import vllm_router_check

from tests.module_harness import run_module

GOOD = {"policy": "consistent_hash", "version": "0.1.9", "ca_file": "ca.pem", "wheelhouse": "", "api_key_file": ""}
FOUND = {"wheelhouse": False, "api_key_file": False}


@pytest.mark.parametrize(
    ("change", "found", "problem"),
    [
        ({"policy": "least_busy"}, {}, "vllm_router_policy=least_busy: not one of " + ", ".join(POLICIES)),
        ({"ca_file": ""}, {}, "vllm_router_ca_file is empty (rule: the router verifies every replica"),
        ({"wheelhouse": "/srv/wheels"}, {}, "vllm_router_wheelhouse=/srv/wheels: no such folder on the controller"),
        (
            {"api_key_file": "/k"},
            {},
            "vllm_router_api_key_file=/k: no such file on the controller (rule: the replicas'",
        ),
    ],
    ids=["policy", "no-ca", "wheelhouse", "key-file"],
)
def test_each_problem_is_named_with_its_value_and_rule(change, found, problem):
    (said,) = router_problems(dict(GOOD, **change), dict(FOUND, **found))
    assert said.startswith(problem), said


def test_usable_options_have_no_problem_and_every_problem_is_listed_at_once():
    assert (
        router_problems(dict(GOOD, wheelhouse="/w", api_key_file="/k"), {"wheelhouse": True, "api_key_file": True})
        == []
    )
    bad = dict(GOOD, policy="x", ca_file="", wheelhouse="/w", api_key_file="/k")
    assert [p.split("=")[0].split(" ")[0] for p in router_problems(bad, FOUND)] == [
        "vllm_router_policy",
        "vllm_router_ca_file",
        "vllm_router_wheelhouse",
        "vllm_router_api_key_file",
    ]


def test_the_module_looks_on_the_controller_and_changes_nothing(tmp_path):
    key = tmp_path / "api-key"
    key.write_text("k\n")
    result = run_module(vllm_router_check, dict(GOOD, wheelhouse=str(tmp_path), api_key_file=str(key)))
    assert not result["failed"] and not result["changed"] and result["problems"] == []
    result = run_module(vllm_router_check, dict(GOOD, wheelhouse=str(tmp_path / "none"), api_key_file=str(tmp_path)))
    assert [p.split("=")[0] for p in result["problems"]] == ["vllm_router_wheelhouse", "vllm_router_api_key_file"]
