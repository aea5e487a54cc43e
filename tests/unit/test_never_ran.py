"""tests/testbed/helpers.assert_never_ran: a test that asserts a task did not run first proves the task exists."""

import pytest

from tests.testbed.helpers import assert_never_ran, role_task_names


def test_task_names_are_read_from_every_task_file_and_block():
    names = role_task_names("vllm_service")
    assert "Render this rank's vllm serve arguments" in names  # tasks/main.yml
    assert "Publish this rank's container name" in names  # tasks/names.yml
    assert any(name.startswith("Take the inventory's lock on the head") for name in role_task_names("vllm_release"))


def test_a_task_that_did_not_run_passes_and_one_that_ran_fails():
    assert_never_ran("TASK [roce_network : Check inputs]", "roce_network", "Converge the live netdev")
    with pytest.raises(AssertionError, match="ran"):
        assert_never_ran("TASK [roce_network : Converge the live netdev (MTU, address, link up)]", "roce_network")


def test_a_name_that_no_task_has_fails_instead_of_passing():
    with pytest.raises(AssertionError, match=r"has no task named 'Converge the dead netdev\.\.\.'"):
        assert_never_ran("", "roce_network", "Converge the dead netdev")
