"""The prepare stage on the pair that site.yml prepared from bare test-bed nodes: run again it changes nothing,
`--check --diff` reports nothing, and every role's own verification passes.

`make test` runs this module first on its shard's test bed (tests/tiers.py), so the served_pair fixture's site.yml
is the convergence from bare nodes (dgx_os.yml makes fresh nodes look like DGX OS) and these runs follow it on the
same nodes. It replaces the Molecule scenario `prepare`, which converged a second pair from bare to prove the same
(337 s of CI); the node roles' own scenarios still converge each role from bare.
"""

import pytest

from tests.testbed import service_faults as sf
from tests.testbed.helpers import playbook

pytestmark = pytest.mark.testbed


@pytest.mark.parametrize("mode", [(), ("--check", "--diff")], ids=["converge-again", "check-diff"])
def test_the_prepared_pair_is_left_unchanged_by_the_prepare_stage(served_pair, mode):
    rc, out = playbook("site.yml", sf.PAIR, "--tags", "prepare", *mode, timeout=1800)
    assert rc == 0, out[-6000:]
    recap = sf.recap(out)
    print(f"\n[prepare stage again {' '.join(mode)}] {recap}")
    assert set(recap) == {"localhost", "node-0", "node-1"}, recap
    changed = {host: counts["changed"] for host, counts in recap.items() if counts["changed"]}
    assert changed == {}, out[-6000:]


def test_every_role_verifies_the_prepared_pair(served_pair):
    rc, out = playbook("tests/testbed/prepared/verify.yml", sf.PAIR)
    assert rc == 0, out[-6000:]
    assert "TASK [Check both nodes hold the same complete snapshot]" in out, out[-6000:]
