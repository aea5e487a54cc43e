#!/usr/bin/python
"""Ansible module: judge what spark_preflight's probes read (module_utils/preflight_checks.py)."""

DOCUMENTATION = r"""
---
module: spark_preflight_check
short_description: Turn spark_preflight's probe results into a node's facts and problems, and report every node's
description:
  - C(stage=node) turns the results the role's read-only probes registered on one node into its facts
    (spark_preflight_facts) and its problems, one line each naming node, fact, value and what was expected.
  - C(stage=report), run once, lists every node's problems in play order (a node without facts was not checked), then
    every compared fact (kernel, driver version, NIC layout) that differs between the nodes, and a summary line per
    node.
  - Reads nothing itself; changes nothing.
options:
  stage:
    description: Which judgement to make.
    type: str
    choices: [node, report]
    required: true
  node:
    description: C(stage=node); the inventory name that starts every problem.
    type: str
    default: ""
  settings:
    description: C(stage=node); the role's settings (its variables without the C(spark_preflight_) prefix).
    type: dict
    suboptions:
      architecture:
        description: Expected machine architecture.
        type: str
        required: true
      check_gpu:
        description: Judge the GPU model and the driver branch.
        type: bool
        required: true
      gpu_name:
        description: GPU name nvidia-smi must report.
        type: str
        required: true
      driver_branch:
        description: Driver branch (major version) nvidia-smi must report.
        type: str
        required: true
      smi_command:
        description: The nvidia-smi command, named in the problem when it reports no GPU.
        type: str
        required: true
      min_memory_gib:
        description: Minimum MemTotal in GiB (0 disables).
        type: float
        required: true
      model_cache_path:
        description: Model cache directory whose free disk was measured.
        type: str
        required: true
      min_free_disk_gib:
        description: Minimum free space in GiB at the model cache path (0 disables).
        type: float
        required: true
      check_remove_ipc:
        description: Require RemoveIPC=no.
        type: bool
        required: true
      logind_conf:
        description: Main logind configuration file.
        type: str
        required: true
      logind_dropin_dirs:
        description: logind drop-in directories, highest precedence first (the first is where the fix goes).
        type: list
        elements: str
        required: true
      check_clock:
        description: Judge the clock offset.
        type: bool
        required: true
      max_clock_offset_s:
        description: Largest allowed clock offset in seconds.
        type: float
        required: true
      check_port:
        description: Require that nothing but our own engine listens on the service port.
        type: bool
        required: true
      service_port:
        description: Service (API) port.
        type: int
        required: true
      engine_project:
        description: Compose project of our engine.
        type: str
        required: true
      check_nic:
        description: Require the RoCE netdev and an RDMA device mapped to it.
        type: bool
        required: true
      roce_netdev:
        description: Netdev of the RoCE link.
        type: str
        required: true
      ibdev2netdev_command:
        description: The ibdev2netdev command, named in the problem when it fails.
        type: str
        required: true
  architecture:
    description: C(stage=node); the node's architecture (ansible_facts.architecture).
    type: str
    default: unknown
  proc:
    description: C(stage=node); the slurp loop's results of C(/proc/sys/kernel/osrelease) and C(/proc/meminfo).
    type: list
    elements: dict
    default: []
  smi:
    description: C(stage=node); the result of C(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader).
    type: dict
    default: {}
  df:
    description: C(stage=node); the result of C(df --output=avail,target -B1) of the model cache path and its parents.
    type: dict
    default: {}
  logind:
    description: C(stage=node); the slurp loop's results of the main logind file and every drop-in file found.
    type: list
    elements: dict
    default: []
  date:
    description: C(stage=node); the result of C(date +%s.%N) on the node.
    type: dict
    default: {}
  controller_before:
    description: C(stage=node); the controller's time (epoch seconds) before the clock probe.
    type: float
  controller_after:
    description: C(stage=node); the controller's time after the clock probe.
    type: float
  listeners:
    description: C(stage=node); the result of C(ss -H -l -t -n -p) for the service port.
    type: dict
    default: {}
  engine:
    description: C(stage=node); the result of C(docker ps --quiet --no-trunc) for our running engine containers.
    type: dict
    default: {}
  listener_cgroups:
    description: C(stage=node); the slurp loop's results of each listener's C(/proc/<pid>/cgroup) (item is the pid).
    type: list
    elements: dict
    default: []
  netdev:
    description: C(stage=node); the stat result of C(/sys/class/net/<RoCE netdev>).
    type: dict
    default: {}
  ibdev:
    description: C(stage=node); the result of C(ibdev2netdev).
    type: dict
    default: {}
  memory_problem:
    description: C(stage=node); spark_memory's problem line, or empty.
    type: str
    default: ""
  hosts:
    description: C(stage=report); every host of the play, in play order.
    type: list
    elements: str
    default: []
  facts:
    description: C(stage=report); each checked node's facts (C(stage=node)'s RV(facts)), by inventory name.
    type: dict
    default: {}
  problems:
    description: C(stage=report); each checked node's problems (C(stage=node)'s RV(problems)), by inventory name.
    type: dict
    default: {}
  compare_nodes:
    description: C(stage=report); report the compared facts that differ between the checked nodes.
    type: bool
    default: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the probes
  spark_preflight_check:
    stage: node
    node: "{{ inventory_hostname }}"
    settings: "{{ settings }}"
    smi: "{{ smi }}"
    ibdev: "{{ ibdev }}"
  register: checked

- name: Report every node at once
  spark_preflight_check:
    stage: report
    hosts: "{{ ansible_play_hosts_all }}"
    facts: "{{ {'node-0': hostvars['node-0'].checked.facts} }}"
    problems: "{{ {'node-0': hostvars['node-0'].checked.problems} }}"
  run_once: true
"""

RETURN = r"""
facts:
  description: C(stage=node); what the probes found (architecture, kernel, gpus, driver_version, memory_gib, ...).
  returned: when stage is node
  type: dict
problems:
  description: Every problem found, one line each, starting with the node's name (or the nodes' names).
  returned: always
  type: list
  elements: str
summary:
  description: C(stage=report); one line per checked node with what was found.
  returned: when stage is report
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.preflight_checks import node_facts, node_problems, report_problems, summary

SETTINGS = {
    "architecture": {"type": "str", "required": True},
    "check_gpu": {"type": "bool", "required": True},
    "gpu_name": {"type": "str", "required": True},
    "driver_branch": {"type": "str", "required": True},
    "smi_command": {"type": "str", "required": True},
    "min_memory_gib": {"type": "float", "required": True},
    "model_cache_path": {"type": "str", "required": True},
    "min_free_disk_gib": {"type": "float", "required": True},
    "check_remove_ipc": {"type": "bool", "required": True},
    "logind_conf": {"type": "str", "required": True},
    "logind_dropin_dirs": {"type": "list", "elements": "str", "required": True},
    "check_clock": {"type": "bool", "required": True},
    "max_clock_offset_s": {"type": "float", "required": True},
    "check_port": {"type": "bool", "required": True},
    "service_port": {"type": "int", "required": True},
    "engine_project": {"type": "str", "required": True},
    "check_nic": {"type": "bool", "required": True},
    "roce_netdev": {"type": "str", "required": True},
    "ibdev2netdev_command": {"type": "str", "required": True},
}
RESULTS = {"type": "list", "elements": "dict", "default": []}
RESULT = {"type": "dict", "default": {}}


def main():
    module = AnsibleModule(
        argument_spec={
            "stage": {"type": "str", "choices": ["node", "report"], "required": True},
            "node": {"type": "str", "default": ""},
            "settings": {"type": "dict", "options": SETTINGS},
            "architecture": {"type": "str", "default": "unknown"},
            **dict.fromkeys(("proc", "logind", "listener_cgroups"), RESULTS),
            **dict.fromkeys(("smi", "df", "date", "listeners", "engine", "netdev", "ibdev"), RESULT),
            "controller_before": {"type": "float"},
            "controller_after": {"type": "float"},
            "memory_problem": {"type": "str", "default": ""},
            "hosts": {"type": "list", "elements": "str", "default": []},
            "facts": {"type": "dict", "default": {}},
            "problems": {"type": "dict", "default": {}},
            "compare_nodes": {"type": "bool", "default": True},
        },
        required_if=[("stage", "node", ["node", "settings"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["stage"] == "node":
        facts = node_facts(p)
        module.exit_json(changed=False, facts=facts, problems=node_problems(p["node"], facts, p))
    problems = report_problems(p["hosts"], p["facts"], p["problems"], p["compare_nodes"])
    module.exit_json(changed=False, problems=problems, summary=summary(p["hosts"], p["facts"]))


if __name__ == "__main__":
    main()
