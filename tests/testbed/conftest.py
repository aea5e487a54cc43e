"""Fixtures for tests that run real playbooks against the test bed (marker `testbed`)."""

import sys

import pytest

from tests.testbed.helpers import ROOT, INSTANCE, run


@pytest.fixture(scope="module")
def testbed():
    """A running two-node test bed (started if needed, e.g. after a Molecule scenario destroyed it; left running)."""
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/testbed.py"), "up", "--nodes", "2"], timeout=1800)
    assert rc == 0, out
    return {"instance": INSTANCE, "state": ROOT / ".testbed" / INSTANCE}
