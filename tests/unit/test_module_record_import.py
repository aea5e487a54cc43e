"""library/vllm_record.py signs every record with the controller's key; library/vllm_record_import.py takes the
head's copies back only when they verify, and vllm_record_info never sees the others: a planted "passed" record with
an impossible baseline is neither the gate's baseline nor the rollback's target (issue 39, item 2)."""

import hashlib
import json
import os
import shutil

import pytest
from ansible.module_utils.deploy_record import key_id, sign
from ansible.modules import vllm_record, vllm_record_import, vllm_record_info

from tests.module_harness import run_module
from tests.records import DEPLOY_RECORD

RECORD = {**DEPLOY_RECORD, "acceptance": {"passed": True, "summary": {"hot_ttft_s": 0.4, "decode_tps": 31.5}}}
OVERLAY = {"src": "overlays/interface.py", "dest": "/vllm/platforms/interface.py", "content": "def f():\n    pass\n"}
OVERLAY_SHA = hashlib.sha256(OVERLAY["content"].encode()).hexdigest()
# What a planted record claims: the newest passed deployment, with a baseline no real engine meets.
IMPOSSIBLE = {"passed": True, "summary": {"hot_ttft_s": 0.000001, "decode_tps": 1e9, "hot_hit_ratio": 1.0}}
FORGED_ID = "29990101T000000.000000Z-spark-pair-deploy"


@pytest.fixture()
def head(tmp_path):
    """A controller that wrote two signed records (one with an overlay) and kept their copies on its head, then lost
    its records folder; its .spark-serve (the record key) is kept. Yields (key file, records, staging)."""
    key_file, records, staging = tmp_path / "spark-serve" / "record-key", tmp_path / "records", tmp_path / "staging"
    for overlays in ([OVERLAY], []):
        run_module(vllm_record, dict(dir=str(records), record=RECORD, overlays=overlays, key_file=str(key_file)))
    shutil.copytree(records, staging, ignore=shutil.ignore_patterns("*.md"))
    shutil.rmtree(records)
    return key_file, records, staging


def take_back(key_file, records, staging, check_mode=False):
    args = dict(staging=str(staging), dir=str(records), key_file=str(key_file), source="node-0:/var/lib/records")
    return run_module(vllm_record_import, args, check_mode=check_mode)


def info(records):
    return run_module(vllm_record_info, {"dir": str(records), "inventory": "spark-pair"}, check_mode=True)


def plant(staging, name, record):
    (staging / f"{name}.json").write_text(json.dumps(dict(record, id=name), indent=2, sort_keys=True))


def test_record_signs_what_it_writes_with_a_key_it_creates_0600_and_never_shows(tmp_path):
    key_file, records = tmp_path / "record-key", tmp_path / "records"
    result = run_module(vllm_record, dict(dir=str(records), record=RECORD, key_file=str(key_file)))
    key = bytes.fromhex(key_file.read_text().strip())
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    saved = json.loads((records / f"{result['id']}.json").read_text())
    assert saved["signature"] == sign({k: v for k, v in saved.items() if k != "signature"}, key)["signature"]
    assert saved["signature"]["key_id"] == key_id(key)
    assert key.hex() not in json.dumps(result) and key.hex() not in (records / f"{result['id']}.json").read_text()
    again = run_module(vllm_record, dict(dir=str(records), record=RECORD, key_file=str(key_file)))
    assert json.loads((records / f"{again['id']}.json").read_text())["signature"]["key_id"] == key_id(key)


def test_record_refuses_a_key_file_others_can_read_and_writes_nothing(tmp_path):
    key_file, records = tmp_path / "record-key", tmp_path / "records"
    key_file.write_text("ab" * 32 + "\n")
    key_file.chmod(0o644)
    result = run_module(vllm_record, dict(dir=str(records), record=RECORD, key_file=str(key_file)))
    assert result["failed"] and result["msg"].startswith(f"record key file {key_file}: mode 0644; rule: ")
    assert result["msg"].endswith("; nothing was written") and "ab" * 32 not in result["msg"]
    assert not records.exists()


def test_a_fresh_controller_with_its_key_takes_back_every_signed_copy_and_its_overlay_text(head):
    key_file, records, staging = head
    result = take_back(key_file, records, staging)
    assert result["changed"] and result["refused"] == [] and result["warnings"] == []
    assert sorted(result["imported"]) == sorted([p.name for p in staging.glob("*.json")] + [f"overlays/{OVERLAY_SHA}"])
    found = info(records)
    assert found["unreadable"] == [] and found["last_passed"]["overlay_problems"] == []
    assert len(found["records"]) == 2
    assert take_back(key_file, records, staging)["imported"] == [], "a second run has nothing to take back"


def signed_elsewhere():
    return sign(dict(RECORD, id="29990101T000000.000000Z-spark-pair-deploy", acceptance=IMPOSSIBLE), b"k" * 32)


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda staging: plant(staging, FORGED_ID, dict(RECORD, acceptance=IMPOSSIBLE)), "it carries no signature"),
        (
            lambda staging: (staging / f"{FORGED_ID}.json").write_text(json.dumps(signed_elsewhere())),
            "signed with another key",
        ),
        (
            # A signed copy of the controller's own record, its baseline raised and moved to the newest id.
            lambda staging: plant(
                staging, FORGED_ID, dict(json.loads(next(staging.glob("*.json")).read_text()), acceptance=IMPOSSIBLE)
            ),
            "its content does not match its signature (changed after it was signed)",
        ),
    ],
    ids=["unsigned", "another key", "a signed record changed"],
)
def test_a_planted_passed_record_is_named_and_is_neither_the_baseline_nor_the_rollback_target(head, forge, why):
    key_file, records, staging = head
    forge(staging)
    result = take_back(key_file, records, staging)
    (refused,) = result["refused"]
    assert refused["path"] == f"node-0:/var/lib/records/{FORGED_ID}.json" and why in refused["error"], refused
    (warning,) = result["warnings"]
    assert warning.startswith(f"head copy node-0:/var/lib/records/{FORGED_ID}.json is not used: ") and why in warning
    assert not (records / f"{FORGED_ID}.json").exists()
    found = info(records)
    assert found["last_passed"]["id"] != FORGED_ID and found["last_passed"]["acceptance"] == RECORD["acceptance"]
    assert found["rollback_target"]["id"] != FORGED_ID
    assert FORGED_ID not in [r["id"] for r in found["records"]]


def test_a_head_copy_never_replaces_a_record_the_controller_has_and_an_unsigned_own_record_stays_trusted(head):
    """A record written before records were signed is the controller's own: it stays the baseline. The head's
    (forged) copy under its name is not even read."""
    key_file, records, staging = head
    records.mkdir()
    own = dict(RECORD, id="20980101T000000.000000Z-spark-pair-deploy")
    (records / f"{own['id']}.json").write_text(json.dumps(own))
    plant(staging, own["id"], dict(RECORD, status="failed"))
    result = take_back(key_file, records, staging)
    assert own["id"] + ".json" not in result["imported"] and result["refused"] == []
    assert json.loads((records / f"{own['id']}.json").read_text()) == own
    assert {r["id"] for r in info(records)["records"]} >= {own["id"]}


def test_an_overlay_text_that_does_not_rehash_to_its_name_is_named_and_not_stored(head):
    key_file, records, staging = head
    (staging / "overlays" / OVERLAY_SHA).write_text("import os; os.system('planted')\n")
    result = take_back(key_file, records, staging)
    (refused,) = result["refused"]
    assert refused["path"] == f"node-0:/var/lib/records/overlays/{OVERLAY_SHA}", refused
    assert refused["error"].startswith("its text hashes to ") and refused["error"].endswith("not to its name")
    assert not (records / "overlays" / OVERLAY_SHA).exists()
    (with_overlay,) = [p.stem for p in staging.glob("*.json") if json.loads(p.read_text())["overlays"]]
    args = {"dir": str(records), "inventory": "spark-pair", "restore": with_overlay}
    (problem,) = run_module(vllm_record_info, args)["rollback_target"]["overlay_problems"]
    assert problem.endswith("No such file or directory"), "the restore refuses a record whose text is missing"


def test_a_text_no_record_names_is_left_unused(head):
    key_file, records, staging = head
    stray = "x = 1\n"
    (staging / "overlays" / hashlib.sha256(stray.encode()).hexdigest()).write_text(stray)
    result = take_back(key_file, records, staging)
    assert not any(hashlib.sha256(stray.encode()).hexdigest() in name for name in result["imported"])
    assert result["refused"] == []


def test_without_the_record_key_no_head_copy_is_used_and_each_is_named(head, tmp_path):
    _, records, staging = head
    result = take_back(tmp_path / "lost" / "record-key", records, staging)
    assert result["imported"] == [] and not records.exists()
    assert len(result["refused"]) == len(list(staging.glob("*.json")))
    for refused in result["refused"]:
        assert refused["error"].startswith(f"no record key to verify it with (record key file {tmp_path}/lost/")


def test_check_mode_names_what_it_would_take_back_and_writes_nothing(head):
    key_file, records, staging = head
    result = take_back(key_file, records, staging, check_mode=True)
    assert result["changed"] and len(result["imported"]) == 3 and not records.exists()
