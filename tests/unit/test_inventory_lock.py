"""The inventory's lock: module_utils/inventory_lock.py (the rules) and action_plugins/spark_lock.py run in-process
against a head simulated by a real shell on a temporary folder (the plugin's commands run as they would there)."""

import json
import os
import subprocess
import time
from unittest import mock

import pytest
from ansible.module_utils.inventory_lock import decide, describe, parse, refusal, watchdog_may_act
from ansible.modules import spark_lock as spark_lock_doc
from ansible.plugins.action import spark_lock

from tests.module_harness import check_returns

DEPLOY = {"kind": "deploy", "host": "ctl", "pid": 4242, "command": "ansible-playbook site.yml", "since": 1.0e9}


def test_the_rules():
    me = {"kind": "deploy", "host": "ctl"}
    assert decide(None, me, None) == ("take", "free")
    assert decide({}, me, None)[0] == "take", "a lock file cut short is replaced"
    assert decide(DEPLOY, me, True)[0] == "refuse"
    assert decide(DEPLOY, me, False)[0] == "take", "this controller's ansible-playbook is gone"
    assert decide(dict(DEPLOY, host="other"), me, None)[0] == "refuse", "another controller: cannot tell"
    watchdog = {"kind": "watchdog", "host": "head", "pid": 7}
    assert decide(watchdog, me, True)[0] == "stop" and decide(watchdog, me, False)[0] == "take"
    assert parse("") is None and parse("{cut") == {} and parse('{"kind": "deploy"}') == {"kind": "deploy"}


def test_the_holder_is_named_whole():
    text = describe(DEPLOY, now=1.0e9 + 12)
    assert text == "deploy by ctl pid 4242 (ansible-playbook site.yml) since 2001-09-09T01:46:40Z (12 s)"
    assert "spark_serve_break_lock=true" in refusal(DEPLOY, "/var/lib/spark-serve/lock.json")


def test_the_watchdog_yields_to_a_deploy_unless_it_is_hours_old():
    assert watchdog_may_act(DEPLOY, 1.0e9 + 60, None)[0] is False
    assert watchdog_may_act(DEPLOY, 1.0e9 + 3 * 3600, None) == (True, "")
    assert watchdog_may_act({"kind": "watchdog", "pid": 1}, 1.0e9, True)[0] is False
    assert watchdog_may_act(None, 1.0e9, None) == (True, "")


RETURNS = __import__("yaml").safe_load(spark_lock_doc.RETURN)


@pytest.fixture()
def head(monkeypatch):
    """The head: every command the plugin sends runs in a real shell here (its lock file under tmp_path)."""

    def execute(self, command, sudoable=True):
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    monkeypatch.setattr(spark_lock.ActionModule, "_low_level_execute_command", execute)


def run(args, check_mode=False):
    task = mock.MagicMock(args=args, async_val=0, check_mode=check_mode, action="spark_lock")
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    play_context = mock.MagicMock(check_mode=check_mode)
    return spark_lock.ActionModule(task, connection, play_context, loader=None, templar=None).run(task_vars={})


def test_a_second_deploy_is_refused_naming_the_first_and_the_first_releases(head, tmp_path, monkeypatch):
    monkeypatch.setattr(spark_lock, "controller_pid_alive", lambda pid: True)  # the first run goes on
    path = str(tmp_path / "lock.json")
    first = run({"path": path})
    assert first["changed"] is False and len(first["token"]) == 32, "a rerun that changes nothing says changed=0"
    held = json.loads((tmp_path / "lock.json").read_text())
    assert held["pid"] == os.getppid() and held["kind"] == "deploy" and held["token"] == first["token"]
    second = run({"path": path})
    assert second["failed"] and second["msg"].startswith("another change of this service is running: deploy by ")
    assert f"pid {os.getppid()}" in second["msg"]
    assert run({"path": path, "state": "released", "token": "not-mine"})["released"] is False
    assert (tmp_path / "lock.json").exists(), "never another run's lock"
    assert run({"path": path, "state": "released", "token": first["token"]})["released"] is True
    assert not (tmp_path / "lock.json").exists()
    assert check_returns("spark_lock", RETURNS, first) == []


def test_a_crashed_deploy_of_this_controller_is_taken_over(head, tmp_path):
    path = tmp_path / "lock.json"
    crashed = dict(DEPLOY, host=spark_lock.socket.gethostname(), pid=999999999, token="old")
    path.write_text(json.dumps(crashed))
    result = run({"path": str(path)})
    assert result["changed"] and result["msg"].startswith("took the lock over from stale: deploy by ")
    assert json.loads(path.read_text())["token"] == result["token"]


def test_another_controllers_lock_is_broken_only_when_asked(head, tmp_path):
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(dict(DEPLOY, host="other-controller", token="theirs")))
    assert run({"path": str(path)})["failed"]
    broken = run({"path": str(path), "break_lock": True})
    assert broken["changed"] and broken["msg"].startswith("broke deploy by other-controller")


def test_a_running_watchdog_is_stopped_before_the_deploy_takes_the_lock(head, tmp_path):
    path = tmp_path / "lock.json"
    # The watchdog's look or restart on the head: not this test's child, as it is not the deploy's.
    pid = int(subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True).stdout)
    try:
        path.write_text(json.dumps({"kind": "watchdog", "host": "head", "pid": pid, "since": time.time()}))
        started = time.monotonic()
        result = run({"path": str(path), "stop_timeout_s": 10})
        assert time.monotonic() - started < 5, "SIGTERM ends it: no wait for the SIGKILL"
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
        assert result["changed"] and result["msg"].startswith("took the lock over from watchdog by head")
        assert result["stopped_watchdog"] is True, "the deploy restarts what the stopped restart left"
    finally:
        subprocess.run(["kill", "-9", str(pid)], capture_output=True)


def test_check_mode_takes_nothing(head, tmp_path):
    assert run({"path": str(tmp_path / "lock.json")}, check_mode=True)["changed"] is False
    assert not (tmp_path / "lock.json").exists()
