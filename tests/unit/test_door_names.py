"""The door certificate's names and its CA's name constraints (module_utils/door_names.py, module front_door_names):
an address is an IP name, anything else a DNS name; the CA permits exactly those names, keeps what it permitted
before, and a name no certificate can carry is refused by value and rule."""

import datetime
import ipaddress

import pytest
from ansible.module_utils.door_names import door_names, permitted_subtree
from ansible.modules import front_door_names
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.module_harness import run_module


@pytest.mark.parametrize(
    ("san", "subtree"),
    [
        ("IP:10.0.0.5", "IP:10.0.0.5/32"),
        ("IP:fd00::5", "IP:fd00::5/128"),
        ("DNS:spark-a", "DNS:spark-a"),
        ("DNS:*.lab.example", "DNS:lab.example"),  # a wildcard's base domain and its subdomains
    ],
)
def test_each_name_is_permitted_alone(san, subtree):
    assert permitted_subtree(san) == subtree


def test_a_head_names_its_address_inventory_name_and_loopback_once_each():
    sans, permitted, violations = door_names(["10.0.0.5", "Spark-A", "127.0.0.1", "localhost", "10.0.0.5"], [])
    assert violations == []
    assert sans == ["IP:10.0.0.5", "DNS:spark-a", "IP:127.0.0.1", "DNS:localhost"]
    assert permitted == ["DNS:localhost", "DNS:spark-a", "IP:10.0.0.5/32", "IP:127.0.0.1/32"]


def test_the_ca_keeps_what_it_permitted_for_another_inventory_and_adds_this_heads_names():
    before = ["DNS:localhost", "DNS:router", "IP:10.0.0.9/32", "IP:127.0.0.1/32"]
    _, permitted, _ = door_names(["10.0.0.5", "spark_b", "127.0.0.1", "localhost"], before)
    assert permitted == sorted(before + ["DNS:spark_b", "IP:10.0.0.5/32"])


def test_every_name_no_certificate_can_carry_is_refused_at_once():
    names = ["10.0.0.5", "spark a", "-lead", "a" * 64 + ".lab", "ok.lab"]
    sans, _, violations = door_names(names, [])
    assert sans == ["IP:10.0.0.5", "DNS:ok.lab"]
    assert [v.split(": ", 1)[1].split(" is ")[0] for v in violations] == [
        "'spark a'",
        "'-lead'",
        repr("a" * 64 + ".lab"),
    ]
    assert all(v.startswith("front_door_names (with ansible_host and the inventory name): ") for v in violations)
    assert all("(rule: letters, digits, _ and inner hyphens" in v for v in violations)


def ca_certificate(path, permitted):
    """A self-signed CA certificate at `path` whose name constraints permit `permitted` (cryptography names)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    now = datetime.datetime.now(datetime.UTC)
    builder = x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    builder = builder.serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
    if permitted is not None:
        builder = builder.add_extension(x509.NameConstraints(permitted, None), critical=True)
    path.write_bytes(builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return str(path)


@pytest.mark.parametrize(
    ("permitted", "expected"),
    [
        (None, ["DNS:spark-a", "IP:10.0.0.5/32"]),  # a CA made before the constraints: it permits what this head needs
        (
            [x509.DNSName("router"), x509.IPAddress(ipaddress.ip_network("10.0.0.9/32"))],
            ["DNS:router", "DNS:spark-a", "IP:10.0.0.5/32", "IP:10.0.0.9/32"],
        ),
    ],
    ids=["unconstrained-ca", "constrained-ca"],
)
def test_the_module_keeps_what_the_ca_permits_and_changes_nothing(tmp_path, permitted, expected):
    ca_file = ca_certificate(tmp_path / "ca.pem", permitted)
    result = run_module(front_door_names, {"names": ["10.0.0.5", "spark-a"], "ca_file": ca_file})
    assert not result["failed"] and not result["changed"]
    assert result["sans"] == ["IP:10.0.0.5", "DNS:spark-a"]
    assert result["permitted"] == expected and result["violations"] == []


def test_the_module_starts_from_nothing_without_a_ca_and_names_an_unreadable_one(tmp_path):
    result = run_module(front_door_names, {"names": ["spark-a"], "ca_file": str(tmp_path / "none.pem")})
    assert result["permitted"] == ["DNS:spark-a"]
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    result = run_module(front_door_names, {"names": ["spark-a"], "ca_file": str(tmp_path / "bad.pem")})
    assert result["failed"] and result["msg"].startswith(f"front_door_ca_dir: {tmp_path / 'bad.pem'} is no readable")
