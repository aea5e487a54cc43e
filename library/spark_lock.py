#!/usr/bin/python
"""Documentation for the spark_lock action plugin (action_plugins/spark_lock.py does the work)."""

DOCUMENTATION = r"""
---
module: spark_lock
short_description: Take or release the inventory's lock on the head (deploy, rollback and the watchdog's restart)
description:
  - One lock per inventory, a JSON file on the head naming its holder (kind, controller host, pid, command, since).
    Deploy and rollback take it before anything changes and release it at the end, failed or not; the head's
    watchdog takes it before it stops or restarts the service, and a look skips while a deploy holds it.
  - A second deploy or rollback is refused at once, naming the holder. A lock whose holder provably no longer runs
    (the watchdog's pid on the head, or an ansible-playbook of this controller) is taken over, saying so; a lock
    of another controller is broken only with O(break_lock).
  - When the watchdog holds the lock (a look that acts, or an automatic restart), the deploy stops it first
    (SIGTERM, then SIGKILL after O(stop_timeout_s)) and then takes the lock.
  - Runs on the controller through the task's connection to the head and its become. In check mode nothing is
    taken.
options:
  path:
    description: The lock file on the head.
    type: str
    required: true
  state:
    description: C(held) takes the lock, C(released) removes it when its token is O(token).
    type: str
    default: held
    choices: [held, released]
  kind:
    description: Who takes it.
    type: str
    default: deploy
    choices: [deploy, rollback]
  token:
    description: The token C(held) returned; a release with another token removes nothing.
    type: str
  break_lock:
    description: Take a lock another controller holds (only when that run is known to be gone).
    type: bool
    default: false
  stop_timeout_s:
    description: Seconds the watchdog gets to stop after SIGTERM.
    type: int
    default: 60
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Take the inventory's lock on the head
  spark_lock:
    path: /var/lib/spark-serve/lock.json
  run_once: true
  register: lock
"""

RETURN = r"""
released:
  description: Whether the release removed the lock (only this run's own). A lock of one's own is transient, so
    neither taking nor releasing it reports a change; taking over another's does.
  returned: when released
  type: bool
token:
  description: What the release must present.
  returned: when taken
  type: str
stopped_watchdog:
  description: Whether a watchdog look or restart held the lock and was stopped; the ranks it left are in an unknown
    state, so the deploy restarts them even when they run what the profile asks for.
  returned: when taken
  type: bool
holder:
  description: The lock's holder (taken) or the one that refused this run (refused).
  returned: always
  type: dict
  sample: {kind: deploy, host: ctl, pid: 4242, command: ansible-playbook site.yml --tags deploy, since: 1765000000}
"""

from ansible.module_utils.basic import AnsibleModule

# Reached only when the action plugin is not found (action_plugins missing from the configuration).
if __name__ == "__main__":
    AnsibleModule(argument_spec={}).fail_json(msg="spark_lock runs as an action plugin on the controller")
