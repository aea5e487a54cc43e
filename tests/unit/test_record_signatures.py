"""A record's signature and what a head's copy must pass before the controller takes it back (module_utils/
deploy_record.py): the record key, the canonical form, sign and verify, every hash field, overlay texts re-hashed."""

import hashlib
import json
import os

import pytest
from ansible.module_utils.deploy_record import (
    RecordKeyError,
    canonical,
    ensure_key,
    head_copy_problem,
    key_id,
    overlay_text_problem,
    read_key,
    sign,
    signature_problem,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
TEXT = "def f():\n    pass\n"
TEXT_SHA = hashlib.sha256(TEXT.encode()).hexdigest()
ID = "20990101T000000.000000Z-spark-pair-deploy"
RECORD = {
    "id": ID,
    "kind": "deploy",
    "status": "passed",
    "inventory": "spark-pair",
    "image": {"ref": "r/vllm@sha256:" + "a" * 64, "digest": "sha256:" + "a" * 64, "id": "sha256:" + "b" * 64},
    "model": {"id": "org/m", "revision": "fc694b54", "files_sha256": "c" * 64},
    "overlays": [{"src": "o.py", "dest": "/vllm/o.py", "sha256": TEXT_SHA}],
    "ranks": [{"rank": 0, "host": "a", "config_hash": "d" * 64}],
    "acceptance": {"passed": True, "summary": {"hot_ttft_s": 0.4, "decode_tps": 31.5}},
}


def as_file(record):
    """A record as vllm_record writes it (indented, sorted) and the head keeps it."""
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def signed(record=RECORD, key=KEY):
    return sign(json.loads(json.dumps(record)), key)


def test_a_signed_record_verifies_after_its_file_round_trip_whatever_its_indentation():
    record = signed()
    assert record["signature"]["alg"] == "hmac-sha256" and len(record["signature"]["value"]) == 64
    assert record["signature"]["key_id"] == key_id(KEY) and KEY.hex() not in json.dumps(record)
    assert signature_problem(json.loads(as_file(record)), KEY) is None
    assert signature_problem(json.loads(json.dumps(record)), KEY) is None
    assert canonical(record) == canonical(dict(reversed(list(record.items())))), "key order does not matter"


def tampered(change):
    record = json.loads(json.dumps(signed()))
    change(record)
    return record


@pytest.mark.parametrize(
    ("record", "key", "problem"),
    [
        (tampered(lambda r: r.update(status="failed")), KEY, "its content does not match its signature"),
        (
            tampered(lambda r: r["acceptance"]["summary"].update(decode_tps=1e9)),
            KEY,
            "its content does not match its signature (changed after it was signed)",
        ),
        (tampered(lambda r: r.update(extra="x")), KEY, "its content does not match its signature"),
        (signed(), OTHER_KEY, f"signed with another key (key id '{key_id(KEY)}', this controller's is"),
        (signed(key=OTHER_KEY), KEY, "signed with another key"),
        (RECORD, KEY, "it carries no signature; rule: a head's copy is used only when the controller's key signed"),
        (dict(RECORD, signature="x" * 64), KEY, "signature 'xxxx"),
        (tampered(lambda r: r["signature"].update(alg="none")), KEY, "signature.alg 'none' is not hmac-sha256"),
        (tampered(lambda r: r["signature"].update(value="../" * 3)), KEY, "signature.value '../../../' is not 64"),
        (tampered(lambda r: r["signature"].update(value="A" * 64)), KEY, "is not 64 lowercase hex"),
    ],
    ids=[
        "status changed",
        "baseline changed",
        "field added",
        "wrong key",
        "another controller's key",
        "no signature",
        "signature not a mapping",
        "another algorithm",
        "signature value a path",
        "signature value upper case",
    ],
)
def test_a_record_that_is_not_the_signed_one_is_refused_saying_why(record, key, problem):
    found = signature_problem(record, key)
    assert found is not None and problem in found, found


def copy_of(record):
    return f"{record['id']}.json", as_file(record)


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (f"{ID}.json", "{not json", "not JSON ("),
        (f"{ID}.json", "[]", "not a deployment record (no id)"),
        ("20990101T000000.000000Z-other-deploy.json", as_file(signed()), "its file name is not its id"),
        (
            *copy_of(signed(dict(RECORD, overlays=[{"src": "o", "dest": "/d", "sha256": "../../etc/shadow"}]))),
            "overlays[0].sha256 '../../etc/shadow' is not 64 lowercase hex",
        ),
        (*copy_of(signed(dict(RECORD, model=dict(RECORD["model"], files_sha256="f" * 63)))), "model.files_sha256 'fff"),
        (*copy_of(signed(dict(RECORD, ranks=[{"rank": 0, "config_hash": "Z" * 64}]))), "ranks[0].config_hash 'ZZZ"),
        (
            *copy_of(signed(dict(RECORD, image=dict(RECORD["image"], digest="sha256:ab")))),
            "image.digest 'sha256:ab' is not sha256:<64 lowercase hex>",
        ),
        (*copy_of(signed(dict(RECORD, image=dict(RECORD["image"], id="b" * 64)))), "image.id 'bbb"),
        (
            *copy_of(signed(dict(RECORD, profile={"image": {"patches": [{"sha256": "1"}]}}))),
            "profile.image.patches[0].sha256 '1' is not 64",
        ),
        (*copy_of(RECORD), "it carries no signature"),
    ],
    ids=[
        "not JSON",
        "no id",
        "named not by its id",
        "overlay hash a path",
        "files hash 63 hex",
        "config hash upper case",
        "digest short",
        "image id without sha256:",
        "patch hash short",
        "unsigned",
    ],
)
def test_a_head_copy_is_taken_back_only_whole_named_by_its_id_with_hashes_that_are_hashes_and_signed(
    name, text, problem
):
    record, found = head_copy_problem(name, text, KEY)
    assert record is None and found is not None and problem in found, found


def test_a_signed_well_formed_head_copy_is_taken_back_and_empty_hashes_mean_not_known():
    record, problem = head_copy_problem(*copy_of(signed()), KEY)
    assert problem is None and record["id"] == ID
    unknown = dict(RECORD, image=dict(RECORD["image"], digest="", id=""), model=dict(RECORD["model"], files_sha256=""))
    record, problem = head_copy_problem(*copy_of(signed(unknown)), KEY)
    assert problem is None, problem


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        (TEXT_SHA, TEXT.encode(), None),
        (TEXT_SHA, b"import os; os.system('planted')\n", "its text hashes to "),
        ("../" + TEXT_SHA[3:], TEXT.encode(), "is not 64 lowercase hex"),
        (TEXT_SHA.upper(), TEXT.encode(), "is not 64 lowercase hex"),
    ],
    ids=["its own text", "another text under its name", "a path", "upper case"],
)
def test_an_overlay_text_is_taken_back_only_when_it_rehashes_to_its_name(name, data, problem):
    found = overlay_text_problem(name, data)
    assert found == problem if problem is None else problem in found, found


def test_the_record_key_is_created_once_0600_and_read_back(tmp_path):
    path = tmp_path / "state" / "record-key"
    key = ensure_key(str(path))
    assert len(key) == 32 and os.stat(path).st_mode & 0o777 == 0o600
    assert path.read_text() == key.hex() + "\n"
    assert ensure_key(str(path)) == key == read_key(str(path)), "never replaced once it exists"
    assert not list(path.parent.glob(".writing-*"))


@pytest.mark.parametrize(
    ("content", "mode", "problem"),
    [
        (KEY.hex(), 0o644, "mode 0644; rule: the record key is readable by its owner only (chmod 600 "),
        (KEY.hex()[:-2], 0o600, "its content is not 64 lowercase hex characters (32 bytes)"),
        ("é" * 32, 0o600, "its content is not 64 lowercase hex characters"),
        (None, None, "No such file or directory"),
    ],
    ids=["readable by others", "short", "not ASCII", "missing"],
)
def test_a_record_key_that_cannot_be_trusted_is_refused_by_path_and_rule_never_quoted(tmp_path, content, mode, problem):
    path = tmp_path / "record-key"
    if content is not None:
        path.write_text(content + "\n")
        path.chmod(mode)
    with pytest.raises(RecordKeyError) as refused:
        read_key(str(path))
    message = str(refused.value)
    assert message.startswith(f"record key file {path}: ") and problem in message, message
    assert content is None or content not in message
