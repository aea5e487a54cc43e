"""roles/front_door's keys (module_utils/door_keys.py and its module front_door_keys): each key becomes its SHA-256
digest with its tenant's name and limits; every violation is listed at once, naming the field, the value and the
rule, and no key text ever appears in a result."""

import hashlib
import re
import stat
import subprocess

import pytest
from ansible.module_utils.door_keys import admin_entries, door_keys, key_violations, member_credential
from ansible.modules import front_door_keys

from tests.module_harness import run_module

OPERATOR_KEY = "sk-operator-0123456789abcdef"
ALICE_KEY = "sk-alice-0123456789abcdef01"
BOB_KEY = "sk-bob-0123456789abcdef0123"


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()


def test_the_operator_comes_first_without_limits_and_each_tenant_with_its_own():
    tenants = [
        {"name": "alice", "key_file": "a", "requests_per_minute": 60, "burst": 5, "max_concurrent": 2},
        {"name": "bob", "key_file": "b"},
    ]
    entries, revoked, violations = door_keys("op", OPERATOR_KEY + "\n", tenants, [ALICE_KEY, BOB_KEY + "\n"])
    assert violations == [] and revoked == []
    assert entries == [
        {"name": "operator", "sha256": digest(OPERATOR_KEY), "requests_per_minute": 0, "burst": 0, "max_concurrent": 0},
        {"name": "alice", "sha256": digest(ALICE_KEY), "requests_per_minute": 60, "burst": 5, "max_concurrent": 2},
        {"name": "bob", "sha256": digest(BOB_KEY), "requests_per_minute": 0, "burst": 0, "max_concurrent": 0},
    ]


def test_a_revoked_tenant_is_left_out_and_its_key_file_is_not_needed():
    tenants = [{"name": "alice", "key_file": "/gone", "revoked": True}, {"name": "bob", "key_file": "b"}]
    entries, revoked, violations = door_keys("", None, tenants, [None, BOB_KEY])
    assert violations == [] and revoked == ["alice"]
    assert [entry["name"] for entry in entries] == ["bob"]


def test_no_key_and_no_tenant_lets_everyone_through():
    assert door_keys("", None, [], []) == ([], [], [])


@pytest.mark.parametrize(
    ("tenant", "text", "wanted"),
    [
        ({"name": "Alice", "key_file": "a"}, ALICE_KEY, "front_door_tenants[0].name='Alice': not a tenant name"),
        ({"name": "a-b", "key_file": "a"}, ALICE_KEY, "front_door_tenants[0].name='a-b': not a tenant name"),
        ({"name": "operator", "key_file": "a"}, ALICE_KEY, "front_door_tenants[0].name='operator': reserved"),
        ({"key_file": "a"}, ALICE_KEY, "front_door_tenants[0].name=None: not a tenant name"),
        (
            {"name": "alice", "key_file": "/k"},
            None,
            "front_door_tenants[0].key_file=/k: no such file on the controller",
        ),
        ({"name": "alice", "key_file": "/k"}, "short", "front_door_tenants[0].key_file=/k: the key must be 16 to 512"),
        ({"name": "alice", "key_file": "/k"}, "has space inside it!", "the key must be 16 to 512"),
        ({"name": "alice", "key_file": "a", "burst": -1}, ALICE_KEY, "front_door_tenants[0].burst=-1: not a whole"),
        ({"name": "alice", "key_file": "a", "max_concurrent": "2"}, ALICE_KEY, "max_concurrent='2': not a whole"),
        ({"name": "alice", "key_file": "a", "requests_per_minute": True}, ALICE_KEY, "requests_per_minute=True"),
        ({"name": "alice", "key_file": "a", "burst": 3}, ALICE_KEY, "burst=3: a burst without requests_per_minute"),
    ],
)
def test_each_bad_tenant_is_named_with_its_value_and_rule(tenant, text, wanted):
    entries, _, violations = door_keys("", None, [tenant], [text])
    assert len(violations) == 1 and wanted in violations[0], violations
    assert "(rule: " in violations[0]
    assert entries == []


def test_every_violation_is_listed_at_once():
    tenants = [
        {"name": "alice", "key_file": "a"},
        {"name": "alice", "key_file": "b", "max_concurrent": -2},
        {"name": "carol", "key_file": "c"},
    ]
    _, _, violations = door_keys("/op", None, tenants, [ALICE_KEY, BOB_KEY, ALICE_KEY])
    assert len(violations) == 4, violations
    assert violations[0].startswith("front_door_api_key_file=/op: no such file")
    assert violations[1].startswith("front_door_tenants[1].name='alice': named twice")
    assert violations[2].startswith("front_door_tenants[1].max_concurrent=-2: not a whole number")
    assert violations[3] == (
        "front_door_tenants: alice and carol have the same key (rule: one key per tenant, so that each can be "
        "revoked alone)"
    )


def test_a_tenant_with_the_operators_key_is_refused():
    _, _, violations = door_keys("op", OPERATOR_KEY, [{"name": "alice", "key_file": "a"}], [OPERATOR_KEY])
    assert violations == [
        "front_door_tenants: operator and alice have the same key (rule: one key per tenant, so that each can be "
        "revoked alone)"
    ]


def test_the_module_reads_the_files_and_returns_digests_never_a_key(tmp_path):
    (tmp_path / "operator").write_text(OPERATOR_KEY + "\n")
    (tmp_path / "alice").write_text(ALICE_KEY + "\n")
    tenants = [
        {"name": "alice", "key_file": str(tmp_path / "alice"), "max_concurrent": 1},
        {"name": "bob", "key_file": str(tmp_path / "missing")},
        {"name": "carol", "revoked": True},
    ]
    result = run_module(front_door_keys, {"api_key_file": str(tmp_path / "operator"), "tenants": tenants})
    assert not result["failed"] and not result["changed"]
    assert [entry["sha256"] for entry in result["entries"]] == [digest(OPERATOR_KEY), digest(ALICE_KEY)]
    assert result["revoked"] == ["carol"]
    assert result["violations"] == [
        f"front_door_tenants[1].key_file={tmp_path / 'missing'}: no such file on the controller (rule: the key is read "
        f"from a file there; create it once: `(umask 077 && mkdir -p {tmp_path} && openssl rand -hex 32 > "
        f"{tmp_path / 'missing'})`)"
    ]
    assert OPERATOR_KEY not in str(result) and ALICE_KEY not in str(result)


def test_the_missing_key_refusal_prints_a_command_that_creates_it_as_printed(tmp_path):
    """In a fresh clone neither the key nor .spark-serve/ exists; a path may hold a space."""
    key = tmp_path / "a clone" / ".spark-serve" / "api-key"
    (violation,) = key_violations("front_door_api_key_file", str(key), None)
    command = re.search(r"create it once: `(.+)`\)$", violation).group(1)
    subprocess.run(["bash", "-e", "-c", command], check=True, timeout=30)
    assert re.fullmatch(r"[0-9a-f]{64}\n", key.read_text())
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700


ADMIN_KEY = "admin-0123456789abcdef0123"
MEMBERS = ["https://10.0.0.10:8443", "https://10.0.0.20:8443"]


def test_the_admin_key_may_name_any_url_and_each_member_credential_only_its_own():
    entries, violations = admin_entries("/k", ADMIN_KEY + "\n", MEMBERS)
    assert violations == []
    assert entries == [
        {"sha256": digest(ADMIN_KEY), "scope": "*"},
        {"sha256": digest(member_credential(ADMIN_KEY, MEMBERS[0])), "scope": MEMBERS[0]},
        {"sha256": digest(member_credential(ADMIN_KEY, MEMBERS[1])), "scope": MEMBERS[1]},
    ]
    credentials = [member_credential(ADMIN_KEY, url) for url in MEMBERS]
    assert len(set(credentials)) == 2 and ADMIN_KEY not in credentials
    assert member_credential("another-admin-key-0123456", MEMBERS[0]) != credentials[0]


def test_plain_http_members_and_a_missing_admin_key_are_refused_by_name():
    entries, violations = admin_entries("/k", None, ["http://10.0.0.10:8000", "https://10.0.0.20:8443", 7])
    assert entries == []
    assert violations[0].startswith("front_door_admin_key_file=/k: no such file on the controller")
    assert violations[1] == (
        "front_door_admin_members[0]='http://10.0.0.10:8000': not an https:// URL (rule: the router reaches every "
        "replica over TLS verified by the fleet's CA)"
    )
    assert violations[2].startswith("front_door_admin_members[2]=7: not an https:// URL")
    assert len(violations) == 3
