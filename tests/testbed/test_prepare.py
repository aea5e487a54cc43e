"""The prepare stage on the pair that site.yml prepared from bare test-bed nodes: run again it changes nothing,
`--check --diff` reports nothing, and every role's own verification passes.

`make test` runs this module first on its shard's test bed (tests/tiers.py), so the served_pair fixture's site.yml
is the convergence from bare nodes (dgx_os.yml makes fresh nodes look like DGX OS) and these runs follow it on the
same nodes. It replaces the Molecule scenario `prepare`, which converged a second pair from bare to prove the same
(337 s of CI); the node roles' own scenarios still converge each role from bare.

The converge-again run logs in as a non-root user with a sudo password, as on DGX OS (sudo_user), and gives that
password the way `-K` does (`--become-password-file`): the -K path converges at no extra run.
"""

import json
import re

import pytest
import yaml

from tests.testbed import service_faults as sf
from tests.testbed.helpers import INSTANCE, ROOT, assert_never_ran, node_exec, playbook, run

pytestmark = pytest.mark.testbed

SUDO_USER = "spark"
SUDO_PASSWORD = "testbed-sudo-password"  # a test node user's; given on stdin and in a 0600 file only


@pytest.fixture(scope="module")
def sudo_user(served_pair, tmp_path_factory):
    """SUDO_USER on both test nodes: in group sudo with a password (Debian's `%sudo ALL=(ALL:ALL) ALL`, as DGX OS's
    first user), the controller's test-bed key authorized; yields the become password file (0600)."""
    script = (
        f"id -u {SUDO_USER} >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo {SUDO_USER}; "
        f"install -d -m 700 -o {SUDO_USER} -g {SUDO_USER} /home/{SUDO_USER}/.ssh && "
        f"install -m 600 -o {SUDO_USER} -g {SUDO_USER} /root/.ssh/authorized_keys /home/{SUDO_USER}/.ssh/ && "
        "chpasswd"
    )
    for index in range(2):
        node = f"spark-serve-tb{INSTANCE}-node-{index}"
        rc, out = run(["docker", "exec", "-i", node, "sh", "-c", script], input=f"{SUDO_USER}:{SUDO_PASSWORD}\n")
        assert rc == 0, out
    password_file = tmp_path_factory.mktemp("become") / "become-password"
    password_file.write_text(SUDO_PASSWORD + "\n")
    password_file.chmod(0o600)
    return password_file


@pytest.mark.parametrize("mode", [(), ("--check", "--diff")], ids=["converge-again", "check-diff"])
def test_the_prepared_pair_is_left_unchanged_by_the_prepare_stage(served_pair, sudo_user, mode):
    """converge-again alone proves that a non-root login whose sudo password is given as -K prepares the pair
    (every become, the delegated ones included) without changing anything."""
    as_user = () if mode else ("-e", f"ansible_user={SUDO_USER}", "--become-password-file", str(sudo_user))
    rc, out = playbook("site.yml", sf.PAIR, "--tags", "prepare", *mode, *as_user, timeout=1800)
    assert rc == 0, out[-6000:]
    recap = sf.recap(out)
    print(f"\n[prepare stage again {' '.join(mode)}] {recap}")
    assert set(recap) == {"localhost", "node-0", "node-1"}, recap
    changed = {host: counts["changed"] for host, counts in recap.items() if counts["changed"]}
    assert changed == {}, out[-6000:]


def test_a_sudo_user_without_its_password_is_refused_before_any_change(sudo_user):
    """Alone proves: logged in as a user whose sudo wants a password that was not given, the prepare stage stops at
    its first node task on both nodes, with one message per node naming the user, what sudo said and both fixes
    (-K, the passwordless opt-in), and no host changed; the preflight's probes never ran."""
    rc, out = playbook("site.yml", sf.PAIR, "--tags", "prepare", "-e", f"ansible_user={SUDO_USER}", timeout=600)
    assert rc != 0, out[-6000:]
    for node in ("node-0", "node-1"):
        said = re.search(rf'fatal: \[{node}\]: FAILED! => {{"changed": false, "msg": "({node}: .*)"}}$', out, re.M)
        assert said, out[-6000:]
        message = said.group(1)
        assert message.startswith(
            f"{node}: Ansible logs in as {SUDO_USER} and cannot become root with sudo: Missing sudo password."
        ), message
        assert "ansible-playbook -K, --ask-become-pass" in message, message
        assert "-K -e spark_preflight_passwordless_sudo=true" in message, message
    recap = sf.recap(out)
    assert {host: counts["failed"] for host, counts in recap.items()} == {"localhost": 0, "node-0": 1, "node-1": 1}
    assert all(counts["changed"] == 0 for counts in recap.values()), recap
    assert "TASK [spark_preflight : Read the kernel release" not in out
    assert "PLAY [Prepare the nodes]" not in out


def test_every_role_verifies_the_prepared_pair(served_pair):
    rc, out = playbook("tests/testbed/prepared/verify.yml", sf.PAIR)
    assert rc == 0, out[-6000:]
    assert "TASK [Check both nodes hold the same complete snapshot]" in out, out[-6000:]


def test_an_engine_version_the_image_does_not_hold_is_refused_before_the_download(served_pair):
    """Alone proves, with the image's real vLLM: a profile whose engine_version is not the release in the image (the
    test bed's reports 0.32.0+cpu) is refused by the prepare stage's image check, which runs before the model role
    (the plays' order: tests/unit/test_prepare_order.py), while the pair keeps serving."""
    sf.ensure_serving()
    before = [sf.container_identity(i) for i in range(2)]
    override = {"spark_serve_profile_overrides": {"engine_version": "0.33.0"}}
    rc, out = playbook("playbooks/prepare.yml", sf.PAIR, "--tags", "image_check", "-e", json.dumps(override))
    assert rc != 0, out[-6000:]
    said = "engine_version='0.33.0': the image holds vLLM 0.32.0+cpu (rule: engine-version-matches-image"
    assert said in out and "nothing was started" in out, out[-6000:]
    assert_never_ran(out, "hf_model")
    assert [sf.container_identity(i) for i in range(2)] == before, "a refused prepare restarted a rank"
    assert sf.health() == 200


def test_the_block_is_predicted_again_from_the_models_own_config_before_any_rank_starts(served_pair):
    """Alone proves the check after the download: a profile whose estimate (model.config: the tiny hybrid, whose
    640-token block the retention divides) passes is refused by the model's own config.json read from the head (the
    tiny Llama has no state to retain), the config is kept on the controller, and no rank was touched."""
    sf.ensure_serving()
    before = [sf.container_identity(i) for i in range(2)]
    kept = ROOT / ".testbed" / INSTANCE / "spark-serve" / "model-configs" / "spark-serve--tiny-llama@7e57bed0.json"
    kept.unlink(missing_ok=True)  # test set-up: as before the first download (the fixture's prepare kept it)
    estimate = {
        "model": {"config": "tests/engine/models/tiny-qwen3-next/config.json"},
        "engine": {"mamba_cache_mode": "align", "prefix_cache_retention_interval": 640},
    }
    override = {"spark_serve_profile_overrides": estimate}
    rc, out = playbook("playbooks/prepare.yml", sf.PAIR, "--tags", "model_check", "-e", json.dumps(override))
    assert rc != 0, out[-6000:]
    assert "TASK [vllm_service : Remember the estimate's block]" in out, "the estimate was refused: no proof"
    assert re.search(rf"violation\(s\) in the profile \(the cache block predicted from \S+/{kept.name}\)", out), out[
        -6000:
    ]
    assert "engine.prefix_cache_retention_interval=640" in out and "model type 'llama' has none" in out, out[-6000:]
    assert json.loads(kept.read_text()) == json.loads((ROOT / "tests/engine/models/tiny-llama/config.json").read_text())
    assert [sf.container_identity(i) for i in range(2)] == before, "a refused check restarted a rank"
    assert sf.health() == 200


def test_the_passwordless_opt_in_lets_the_sudo_user_in_without_a_password(sudo_user, tmp_path):
    """Alone proves: one run with the password and spark_preflight_passwordless_sudo=true writes a sudoers drop-in
    that visudo accepts (0440), after which the same user becomes root with no password, and the write is
    idempotent. The drop-in is removed afterwards (the other tests' user must keep needing its password)."""
    book = tmp_path / "become.yml"
    task = {"ansible.builtin.import_role": {"name": "spark_preflight", "tasks_from": "become"}}
    book.write_text(yaml.safe_dump([{"hosts": "spark_nodes", "gather_facts": False, "tasks": [task]}]))
    as_user = ("-e", f"ansible_user={SUDO_USER}")
    try:
        rc, out = playbook(
            str(book),
            sf.PAIR,
            *as_user,
            "-e",
            "spark_preflight_passwordless_sudo=true",
            "--become-password-file",
            str(sudo_user),
        )
        assert rc == 0, out[-6000:]
        assert {host: c["changed"] for host, c in sf.recap(out).items()} == {"node-0": 1, "node-1": 1}, out[-3000:]
        rc, out = playbook(str(book), sf.PAIR, *as_user, "-e", "spark_preflight_passwordless_sudo=true")
        assert rc == 0, out[-6000:]
        assert {host: c["changed"] for host, c in sf.recap(out).items()} == {"node-0": 0, "node-1": 0}, out[-3000:]
        rc, out = node_exec(0, "stat -c '%a %U' /etc/sudoers.d/spark-serve && cat /etc/sudoers.d/spark-serve")
        assert out.split() == ["440", "root", SUDO_USER, "ALL=(ALL:ALL)", "NOPASSWD:", "ALL"], out
    finally:
        for index in range(2):
            node_exec(index, "rm -f /etc/sudoers.d/spark-serve")
