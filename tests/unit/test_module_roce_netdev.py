"""roles/roce_network/library/roce_netdev.py run as Ansible runs it, against a fake `ip` that keeps a link's
state: only what differs is changed, check mode changes nothing, a converged link reports no change."""

import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.modules import roce_netdev

from tests.module_harness import run_module

DEV = "enp1s0f1np1"
ARGS = {"device": DEV, "mtu": 9000, "address": "192.168.100.10", "prefix_length": 24}


@pytest.fixture()
def link(monkeypatch):
    """A fake `ip` over one link's state; `commands` lists the changing commands run."""
    state = {"mtu": 1500, "up": False, "ipv4": ["10.0.0.5/16"], "commands": [], "fail": None}

    def show():
        addrs = [{"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1])} for a in state["ipv4"]]
        addrs.append({"family": "inet6", "local": "fe80::1", "prefixlen": 64})
        flags = ["BROADCAST", "MULTICAST"] + (["UP"] if state["up"] else [])
        return json.dumps([{"ifname": DEV, "mtu": state["mtu"], "flags": flags, "operstate": "UP", "addr_info": addrs}])

    def run_command(module, argv, **kwargs):
        args = argv[1:]
        if args[:3] == ["-j", "addr", "show"]:
            return (0, show(), "") if args[4] == DEV else (1, "", f'Device "{args[4]}" does not exist.')
        state["commands"].append(args)
        if state["fail"] and state["fail"] in args:
            return 2, "", "RTNETLINK answers: Operation not permitted"
        if args[:2] == ["link", "set"] and "mtu" in args:
            state["mtu"] = int(args[-1])
        elif args[:2] == ["link", "set"]:
            state["up"] = args[-1] == "up"
        elif args[:2] == ["addr", "del"]:
            state["ipv4"].remove(args[2])
        elif args[:2] == ["addr", "add"]:
            state["ipv4"].append(args[2])
        return 0, "", ""

    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda module, name, required=False: f"/sbin/{name}")
    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return state


def test_converges_only_what_differs_then_reports_no_change(link):
    result = run_module(roce_netdev, ARGS)
    assert result["changed"] is True
    assert [c[1:] for c in result["commands"]] == [
        ["link", "set", "dev", DEV, "mtu", "9000"],
        ["addr", "del", "10.0.0.5/16", "dev", DEV],
        ["addr", "add", "192.168.100.10/24", "dev", DEV],
        ["link", "set", "dev", DEV, "up"],
    ]
    assert result["before"] == {"mtu": 1500, "up": False, "operstate": "UP", "ipv4": ["10.0.0.5/16"]}
    assert result["after"] == {"mtu": 9000, "up": True, "operstate": "UP", "ipv4": ["192.168.100.10/24"]}
    again = run_module(roce_netdev, ARGS)
    assert again["changed"] is False and again["commands"] == []
    assert len(link["commands"]) == 4


def test_check_mode_with_diff_predicts_and_changes_nothing(link):
    result = run_module(roce_netdev, dict(ARGS, mtu=1500), check_mode=True, diff=True)
    assert result["changed"] is True and link["commands"] == []
    assert len(result["commands"]) == 3, "the MTU already matches"
    assert result["diff"]["before"] == "mtu: 1500\nup: False\nipv4: ['10.0.0.5/16']\n"
    assert result["diff"]["after"] == "mtu: 1500\nup: True\nipv4: ['192.168.100.10/24']\n"
    assert link["mtu"] == 1500 and link["ipv4"] == ["10.0.0.5/16"]


def test_a_missing_device_fails_naming_it(link):
    result = run_module(roce_netdev, dict(ARGS, device="eth9"))
    assert result["failed"] and result["msg"] == 'netdev eth9 not found: Device "eth9" does not exist.'


def test_a_failing_command_fails_naming_it_and_stops(link):
    link["fail"] = "del"
    result = run_module(roce_netdev, ARGS)
    assert result["failed"]
    assert result["msg"] == (
        f"/sbin/ip addr del 10.0.0.5/16 dev {DEV} failed (rc 2): RTNETLINK answers: Operation not permitted"
    )
    assert [c[0] for c in link["commands"]] == ["link", "addr"], "nothing runs after the failed command"
