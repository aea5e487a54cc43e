#!/usr/bin/python
"""Ansible module: does this node have the memory the profile's engine takes available now?"""

DOCUMENTATION = r"""
---
module: spark_memory
short_description: Judge a node's available memory against what a deployment profile's engine takes
description:
  - Reads C(/proc/meminfo) on the node and holds MemAvailable (never MemTotal) to the profile's need,
    gpu_memory_utilization x the node's memory (unified on a Spark) or the CPU build's VLLM_CPU_KVCACHE_SPACE, plus
    the profile's C(memory_margin_gib) (module_utils/memory_guard.py).
  - Judges nothing while this project's engine runs on the node (its own ranks hold that memory); the staged start
    checks again once they are gone (action_plugins/vllm_staged_start.py).
  - Fails nothing itself; RV(problem) is one preflight problem line.
options:
  profile:
    description: The resolved deployment profile (platform, engine, env, memory_margin_gib).
    type: dict
    required: true
  engine_project:
    description: Docker compose project of this project's engine ranks.
    type: str
    default: spark-serve
  label:
    description: The node's name, which starts the problem line.
    type: str
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Measure the memory available for the engine
  spark_memory:
    profile: "{{ hostvars['localhost'].spark_serve_resolved }}"
    label: "{{ inventory_hostname }}"
  register: memory
"""

RETURN = r"""
available_gib:
  description: MemAvailable in GiB, or null when /proc/meminfo does not show it.
  returned: always
  type: float
need_gib:
  description: What the profile's engine takes on this node in GiB, or null when unknown.
  returned: always
  type: float
engine_running:
  description: Whether this project's engine runs on the node (then nothing is judged).
  returned: always
  type: bool
problem:
  description: The problem line naming the node, both numbers and where the need comes from, or empty.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.memory_guard import memory_plan, memory_verdict


def engine_running(module, project):
    docker = module.get_bin_path("docker")
    if not docker:
        return False
    filters = ["--filter", f"label=com.docker.compose.project={project}", "--filter", "status=running"]
    rc, out, _ = module.run_command([docker, "ps", "--quiet", *filters])
    return rc == 0 and bool(out.strip())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            profile=dict(type="dict", required=True),
            engine_project=dict(type="str", default="spark-serve"),
            label=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    with open("/proc/meminfo", encoding="utf-8") as meminfo:
        text = meminfo.read()
    available, need, problem = memory_verdict(module.params["label"], text, memory_plan(module.params["profile"]))
    running = engine_running(module, module.params["engine_project"])
    module.exit_json(
        changed=False,
        available_gib=available,
        need_gib=need,
        engine_running=running,
        problem="" if running else problem,
    )


if __name__ == "__main__":
    main()
