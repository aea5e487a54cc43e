#!/usr/bin/python
"""Ansible module: read-only liveness of this node's vLLM rank (container, log, and /health on the head)."""

DOCUMENTATION = r"""
---
module: vllm_ranks
short_description: Report whether this node's vLLM rank is alive
description:
  - Reads the rank's container state and the recent log lines of its current run (since C(.State.StartedAt), because a
    restart by Docker's restart policy leaves the previous run's shutdown errors in the log), and on the head
    also /health.
  - A dead or exited worker is reported even while the head's /health still answers 200 (vLLM does not notice a
    lost worker until a request fails).
  - Read-only; supports check mode.
options:
  container:
    description: Name of the rank's container.
    type: str
    required: true
  head:
    description: Whether this rank is the head (serves the API).
    type: bool
    default: false
  port:
    description: API port of the head.
    type: int
    default: 8000
  log_lines:
    description: How many recent log lines to read.
    type: int
    default: 200
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Read this rank's liveness
  vllm_ranks:
    container: spark-serve-rank1
"""

RETURN = r"""
alive:
  description: Container running and no failure in its recent log.
  returned: always
  type: bool
state:
  description: Container state (running, exited, ...) or null when there is no container.
  returned: always
  type: str
exit_code:
  description: Container exit code.
  returned: always
  type: int
stage:
  description: Furthest start-up stage the log proves.
  returned: always
  type: str
reason:
  description: Why the rank is not alive.
  returned: always
  type: str
health:
  description: HTTP status of /health on the head (null on workers or when it does not answer).
  returned: always
  type: int
"""

import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.rank_watch import rank_verdict


def health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            head=dict(type="bool", default=False),
            port=dict(type="int", default=8000),
            log_lines=dict(type="int", default=200),
        ),
        supports_check_mode=True,
    )
    name = module.params["container"]
    inspect = "{{.State.Status}} {{.State.ExitCode}} {{.State.StartedAt}}"
    rc, out, _ = module.run_command(["docker", "inspect", "-f", inspect, name])
    fields = out.split() if rc == 0 else []
    state, code, started_at = (fields[0], int(fields[1]), fields[2]) if len(fields) == 3 else (None, None, None)
    lines = []
    if state:
        # Only this run's lines: after a restart (Docker's restart policy) the log still holds the previous run's
        # shutdown errors, which would make a serving rank look dead.
        tail = ["--since", started_at, "--tail", str(module.params["log_lines"])]
        _, log_out, log_err = module.run_command(["docker", "logs", *tail, name])
        lines = (log_out + log_err).splitlines()
    alive, stage, reason = rank_verdict(state, code, lines)
    status = health(module.params["port"]) if module.params["head"] else None
    if alive and module.params["head"] and status != 200:
        alive, reason = False, f"/health answered {status}"
    module.exit_json(changed=False, alive=alive, state=state, exit_code=code, stage=stage, reason=reason, health=status)


if __name__ == "__main__":
    main()
