"""The door's certificate (roles/front_door/tasks/tls.yml, on the controller): issued once, kept by a rerun, and
issued again by the same CA once a run falls within front_door_cert_renew_days of its end."""

import subprocess

import pytest
import yaml

from tests.runner import BIN, run

pytestmark = pytest.mark.playbook


def issue(tmp_path, *extra):
    """The role's tls.yml for a head called spark-a (connection local); (rc, output)."""
    book = tmp_path / "tls.yml"
    play = {"name": "tls", "hosts": "spark-a", "gather_facts": False, "vars": {"front_door_ca_dir": str(tmp_path)}}
    play["tasks"] = [{"name": "tls", "ansible.builtin.include_role": {"name": "front_door", "tasks_from": "tls"}}]
    book.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"spark-a": local, "localhost": local}}}))
    return run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(book), *extra], timeout=300)


def certificate(tmp_path):
    """(serial, issuer) of the head's certificate."""
    out = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "spark-a.pem"), "-noout", "-serial", "-issuer"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return tuple(out.split())


def test_a_certificate_near_its_end_is_issued_again_by_the_same_ca(tmp_path):
    rc, out = issue(tmp_path)
    assert rc == 0, out[-3000:]
    first = certificate(tmp_path)
    rc, out = issue(tmp_path)
    assert rc == 0 and certificate(tmp_path) == first, "a rerun far from the end keeps the certificate"
    rc, out = issue(tmp_path, "-e", "front_door_cert_renew_days=900")  # longer than it lasts: always near its end
    assert rc == 0, out[-3000:]
    renewed = certificate(tmp_path)
    assert renewed[0] != first[0], "within the margin the certificate is issued again"
    assert renewed[1:] == first[1:], "by the same CA: clients keep trusting ca.pem"
