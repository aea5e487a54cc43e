"""Fixtures for tests that run real playbooks against the test bed (marker `testbed`)."""

import sys

import pytest

from tests.testbed import service_faults as sf
from tests.testbed.helpers import INSTANCE, ROOT, playbook, run


@pytest.fixture(scope="module")
def testbed():
    """A running two-node test bed (started if needed, e.g. after a Molecule scenario destroyed it; left running)."""
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/testbed.py"), "up", "--nodes", "2"], timeout=1800)
    assert rc == 0, out
    return {"instance": INSTANCE, "state": ROOT / ".testbed" / INSTANCE}


@pytest.fixture(scope="module")
def served_pair(testbed):
    """The pair prepared (engine image in the registry, DGX OS baseline, site.yml) and serving the shipped profile;
    site.yml runs in full only when the pair does not serve yet (e.g. the first test-bed test of a run)."""
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push"], timeout=3600)
    assert rc == 0, out[-3000:]
    rc, out = playbook("molecule/shared/dgx_os.yml")
    assert rc == 0, out[-3000:]
    if not (sf.health() == 200 and all(sf.engine_containers(i) for i in range(2))):
        rc, out = playbook("site.yml", timeout=3600)
        assert rc == 0, out[-6000:]
