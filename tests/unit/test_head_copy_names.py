"""Which files a head reports the controller may read at all (module_utils/deploy_record.py's head_copy_name): a
record or an overlay text directly in the head's records folder, by the names vllm_record writes; any path the head
made up is refused, naming the path and the rule, before anything is read (issue 50, item 2)."""

import pytest
from ansible.module_utils.deploy_record import COPY_RULE, head_copy_name, record_id

ROOT = "/var/lib/spark-serve/records"
RECORD = f"{record_id('20261201T071500.123456Z', 'spark-pair', 'deploy')}.json"
# Records written before ids had microseconds keep their names on the heads.
OLD_RECORD = f"{record_id('20261201T071500Z', 'testbed pair', 'rollback')}.json"
TEXT = "overlays/" + "ab" * 32


def reported(path, **stat):
    """A file as ansible.builtin.find reports it (the fields the check reads)."""
    return {"path": path, "islnk": False, "isreg": True, **stat}


@pytest.mark.parametrize(
    ("entry", "root", "name"),
    [
        (reported(f"{ROOT}/{RECORD}"), ROOT, RECORD),
        (reported(f"{ROOT}/{OLD_RECORD}"), ROOT, OLD_RECORD),
        (reported(f"{ROOT}/{TEXT}"), ROOT, TEXT),
        (reported(f"{ROOT}/{RECORD}"), ROOT + "/", RECORD),
    ],
    ids=["record", "record without microseconds", "overlay text", "root with a trailing slash"],
)
def test_a_record_or_an_overlay_text_in_the_records_folder_is_reduced_to_its_name(entry, root, name):
    assert head_copy_name(entry, root) == (name, None)


HOME = "/home/operator"
REFUSED = [
    # (entry, what the refusal says), the path as the head reported it
    (reported(f"{ROOT}/../../../..{HOME}/.spark-serve/records/{RECORD}"), "has a '..' component"),
    (reported(f"{ROOT}/../../../..{HOME}/.bashrc"), "has a '..' component"),
    (reported(f"{ROOT}/overlays/../{RECORD}"), "has a '..' component"),
    (reported(f"{ROOT}/../records/{RECORD}"), "has a '..' component"),
    (reported(f"{HOME}/.spark-serve/records/{RECORD}"), f"is not in {ROOT}"),
    (reported(f"{ROOT}-planted/{RECORD}"), f"is not in {ROOT}"),
    (reported(RECORD), f"is not in {ROOT}"),
    (reported(f"{ROOT}/{RECORD}\x00.md"), "holds a control character"),
    (reported(f"{ROOT}/{RECORD}\n"), "holds a control character"),
    (reported(f"{ROOT}/x\n{RECORD}"), "holds a control character"),
    (reported(f"{ROOT}/{RECORD}", islnk=True), "is not a regular file (islnk True, isreg True)"),
    (reported(f"{ROOT}/{RECORD}", isreg=False), "is not a regular file (islnk False, isreg False)"),
    ({"path": f"{ROOT}/{RECORD}"}, "is not a regular file (islnk None, isreg None)"),
    (f"{ROOT}/{RECORD}", "is not a regular file (islnk None, isreg None)"),
    (reported(f"{ROOT}/old/{RECORD}"), "is neither <id>.json nor overlays/<64 lowercase hex>"),
    (reported(f"{ROOT}/overlays/{RECORD}"), "is neither"),
    (reported(f"{ROOT}/{'ab' * 32}"), "is neither"),
    (reported(f"{ROOT}/overlays/{'AB' * 32}"), "is neither"),
    (reported(f"{ROOT}/overlays/{'ab' * 31}"), "is neither"),
    (reported(f"{ROOT}/running.json"), "is neither"),
    (reported(f"{ROOT}/watchdog-events.jsonl"), "is neither"),
    (reported(f"{ROOT}/{RECORD[:-5]}.md"), "is neither"),
    (reported(f"{ROOT}/20261201T.json"), "is neither"),
    (reported(f"{ROOT}/20261201T071500Z-spark pair-deploy.json"), "is neither"),
    (reported(f"{ROOT}//{RECORD}"), "is neither"),
    (reported(f"{ROOT}/./{RECORD}"), "is neither"),
    (reported(f"{ROOT}/"), "is neither"),
    (reported(None), "path None is not a string"),
    (reported(42), "path 42 is not a string"),
    ({"islnk": False, "isreg": True}, "path None is not a string"),
]


@pytest.mark.parametrize(("entry", "why"), REFUSED, ids=[repr(entry)[:90] for entry, _ in REFUSED])
def test_a_path_the_head_made_up_is_refused_naming_the_path_and_the_rule(entry, why):
    name, problem = head_copy_name(entry, ROOT)
    assert name is None and why in problem and problem.endswith(COPY_RULE), problem
    path = entry.get("path") if isinstance(entry, dict) else entry
    if isinstance(path, str):
        assert repr(path) in problem, "the path is named as reported, its control characters escaped"
    assert "\n" not in problem and "\x00" not in problem, "a warning stays one line"


def test_a_very_long_path_is_named_by_its_start_and_its_end_where_the_climb_leads():
    path = f"{ROOT}/{'../' * 200}{HOME}/.bashrc"
    _, problem = head_copy_name(reported(path), ROOT)
    assert problem.startswith(f"path '{path[:100]}...") and problem.endswith(
        f"{HOME}/.bashrc' has a '..' component; {COPY_RULE}"
    )
    assert len(problem) < 600
