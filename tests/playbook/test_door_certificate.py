"""The door's certificate (roles/front_door/tasks/tls.yml, on the controller): issued once, kept by a rerun, and
issued again by the same CA once a run falls within front_door_cert_renew_days of its end."""

import subprocess

import pytest
import yaml

from tests.runner import ansible_playbook

pytestmark = pytest.mark.playbook


def issue(tmp_path, *extra, head="spark-a", address=None):
    """The role's tls.yml for one head (connection local, `address` its ansible_host); (rc, output)."""
    book = tmp_path / "tls.yml"
    play = {"name": "tls", "hosts": head, "gather_facts": False, "vars": {"front_door_ca_dir": str(tmp_path)}}
    play["tasks"] = [{"name": "tls", "ansible.builtin.include_role": {"name": "front_door", "tasks_from": "tls"}}]
    book.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    hosts = {head: dict(local, **({"ansible_host": address} if address else {})), "localhost": local}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return ansible_playbook("-i", str(inventory), str(book), *extra, timeout=300)


def openssl(*args):
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def certificate(tmp_path):
    """(serial, issuer) of the head's certificate."""
    rc, out = openssl("x509", "-in", str(tmp_path / "spark-a.pem"), "-noout", "-serial", "-issuer")
    assert rc == 0, out
    return tuple(out.split())


def verify(tmp_path, leaf):
    return openssl("verify", "-CAfile", str(tmp_path / "ca.pem"), str(leaf))


def name_constraints(tmp_path):
    """The CA certificate's name-constraints extension as openssl prints it (critical flag and permitted names)."""
    rc, out = openssl("x509", "-in", str(tmp_path / "ca.pem"), "-noout", "-ext", "nameConstraints")
    assert rc == 0, out
    return out


def forged_leaf(tmp_path, name):
    """A server certificate for `name` signed with the CA's own key, as a thief of that key would make one."""
    key, csr, leaf = (tmp_path / f"forged.{suffix}" for suffix in ("key", "csr", "pem"))
    request = ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key)]
    rc, out = openssl(*request, "-out", str(csr), "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}")
    assert rc == 0, out
    ca = ["-CA", str(tmp_path / "ca.pem"), "-CAkey", str(tmp_path / "ca.key")]
    rc, out = openssl("x509", "-req", "-in", str(csr), *ca, "-days", "1", "-out", str(leaf), "-copy_extensions", "copy")
    assert rc == 0, out
    return leaf


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


def test_the_ca_signs_the_deployments_names_only_and_a_new_head_grows_them(tmp_path):
    """A stolen CA key vouches for no other site: the CA's certificate permits the heads' names only (critical), a
    certificate for another name made with its key fails verification; a second head's run re-signs the CA with
    both heads' names and the same key, and the first head's certificate still verifies."""
    rc, out = issue(tmp_path, address="10.0.0.5")
    assert rc == 0, out[-3000:]
    constraints = name_constraints(tmp_path)
    assert "critical" in constraints, constraints
    for name in ("DNS:spark-a", "DNS:localhost", "IP:10.0.0.5/255.255.255.255", "IP:127.0.0.1/255.255.255.255"):
        assert name in constraints, constraints
    assert verify(tmp_path, tmp_path / "spark-a.pem")[0] == 0
    rc, out = verify(tmp_path, forged_leaf(tmp_path, "bank.example"))
    assert rc != 0 and "permitted subtree violation" in out, out

    ca_key = (tmp_path / "ca.key").read_bytes()
    rc, out = issue(tmp_path, head="spark-b", address="10.0.0.6")
    assert rc == 0, out[-3000:]
    constraints = name_constraints(tmp_path)
    assert "DNS:spark-b" in constraints and "DNS:spark-a" in constraints, constraints
    assert "IP:10.0.0.6/255.255.255.255" in constraints and "IP:10.0.0.5/255.255.255.255" in constraints
    assert (tmp_path / "ca.key").read_bytes() == ca_key
    assert verify(tmp_path, tmp_path / "spark-a.pem")[0] == 0 and verify(tmp_path, tmp_path / "spark-b.pem")[0] == 0
    rc, out = issue(tmp_path, head="spark-b", address="10.0.0.6")
    assert rc == 0 and "changed=0" in out, out[-3000:]


def test_a_name_no_certificate_can_carry_is_refused_before_anything_is_issued(tmp_path):
    rc, out = issue(tmp_path, "-e", '{"front_door_names": ["spark a", "ok.lab"]}')
    assert rc != 0
    assert "'spark a' is no IP address and no DNS name (rule: letters, digits" in out, out[-3000:]
    assert not (tmp_path / "ca.pem").exists() and not (tmp_path / "spark-a.pem").exists()
