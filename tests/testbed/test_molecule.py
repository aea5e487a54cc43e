"""Every Molecule scenario (converge, idempotence, verify) on the real two-node test bed, with wall times."""

import os
import time
from pathlib import Path

import pytest

from tests.testbed.helpers import BIN, ROOT, run

pytestmark = [pytest.mark.testbed, pytest.mark.molecule]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, record_property):
    start = time.monotonic()
    rc, out = run(
        [str(BIN / "molecule"), "test", "-s", scenario],
        timeout=2400,
        env={"MOLECULE_NO_LOG": "false", "PY_COLORS": "0"},
    )
    seconds = time.monotonic() - start
    record_property("wall_seconds", round(seconds, 1))
    print(f"\n[molecule {scenario}] {'passed' if rc == 0 else 'FAILED'} in {seconds:.0f} s")
    log = Path(os.environ.get("SPARK_TESTBED_LOGS", ROOT / ".testbed" / "logs"))
    log.mkdir(parents=True, exist_ok=True)
    (log / f"molecule-{scenario}.log").write_text(out)
    assert rc == 0, out[-6000:]
