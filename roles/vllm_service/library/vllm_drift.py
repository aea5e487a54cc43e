#!/usr/bin/python
"""Ansible module: compare this node's running rank container with the compose project the deploy rendered."""

DOCUMENTATION = r"""
---
module: vllm_drift
short_description: Report, field by field, how a running rank container differs from its rendered compose spec
description:
  - Reads the compose project the deploy rendered on this node (C(docker compose config --format json), so
    env files and defaults are resolved the way Docker Compose resolves them), the running container
    (C(docker inspect)) and its image (C(docker image inspect)).
  - "Compares: image reference and image id, entrypoint and command, environment (the image's own environment
    overlaid with the spec's; a variable added, removed or changed by hand is drift), bind mounts (source,
    destination, read-only), restart policy and the spark-serve labels."
  - Values of secret-looking variables (KEY, TOKEN, SECRET, PASSWORD) are never returned, only that they differ.
  - Read-only; supports check mode.
options:
  container:
    description: Name of the rank's container.
    type: str
    required: true
  compose_dir:
    description: Directory of the rendered compose.yaml.
    type: path
    required: true
  project:
    description: Compose project name.
    type: str
    required: true
  service:
    description: Service name in the compose project.
    type: str
    default: vllm
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Compare the running rank with its spec
  vllm_drift:
    container: spark-serve-rank0
    compose_dir: /etc/spark-serve
    project: spark-serve
"""

RETURN = r"""
drift:
  description: One entry per differing field, C(field), C(spec) and C(running) (secret values replaced).
  returned: always
  type: list
  elements: dict
state:
  description: Container state, or null when there is no container.
  returned: always
  type: str
fields:
  description: The fields compared.
  returned: always
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.redaction import REDACTED, is_secret_name

FIELDS = ["image", "image_id", "entrypoint", "command", "env", "mounts", "restart", "labels"]


def env_dict(pairs):
    return dict(pair.split("=", 1) if "=" in pair else (pair, "") for pair in pairs or [])


def shown(key, value):
    return REDACTED if value is not None and is_secret_name(key) else value


def compare(spec, container, image):
    """[{field, spec, running}] for one compose service `spec`, its `container` and the `image` it names."""
    drift = []

    def differ(field, want, have):
        if want != have:
            drift.append({"field": field, "spec": want, "running": have})

    config, host = container.get("Config", {}), container.get("HostConfig", {})
    differ("image", spec.get("image"), config.get("Image"))
    differ("image_id", image.get("Id"), container.get("Image"))
    entrypoint = spec.get("entrypoint")
    if entrypoint is None:
        entrypoint = image.get("Config", {}).get("Entrypoint")
    differ("entrypoint", entrypoint or None, config.get("Entrypoint") or None)
    command = spec.get("command")
    if command is None:
        command = image.get("Config", {}).get("Cmd")
    differ("command", command, config.get("Cmd"))
    want_env = dict(env_dict(image.get("Config", {}).get("Env")))
    want_env.update({k: "" if v is None else str(v) for k, v in (spec.get("environment") or {}).items()})
    have_env = env_dict(config.get("Env"))
    for key in sorted(set(want_env) | set(have_env)):
        if want_env.get(key) != have_env.get(key):
            drift.append(
                {"field": f"env.{key}", "spec": shown(key, want_env.get(key)), "running": shown(key, have_env.get(key))}
            )
    # Bind mounts by container path: [source, destination, read-only].
    want_mounts = {
        v.get("target"): [v.get("source"), v.get("target"), bool(v.get("read_only"))]
        for v in spec.get("volumes") or []
        if v.get("type", "bind") == "bind"
    }
    have_mounts = {
        m.get("Destination"): [m.get("Source"), m.get("Destination"), not m.get("RW", True)]
        for m in container.get("Mounts") or []
        if m.get("Type") == "bind"
    }
    for dest in sorted(set(want_mounts) | set(have_mounts)):
        differ(f"mounts.{dest}", want_mounts.get(dest), have_mounts.get(dest))
    differ("restart", spec.get("restart") or "no", (host.get("RestartPolicy") or {}).get("Name") or "no")
    labels = config.get("Labels") or {}
    for key, value in sorted((spec.get("labels") or {}).items()):
        if key.startswith("org.spark-serve."):
            differ(f"labels.{key}", value, labels.get(key))
    return drift


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            compose_dir=dict(type="path", required=True),
            project=dict(type="str", required=True),
            service=dict(type="str", default="vllm"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    compose_file = os.path.join(p["compose_dir"], "compose.yaml")
    if not os.path.exists(compose_file):
        module.exit_json(changed=False, drift=[], state=None, fields=FIELDS, msg=f"no {compose_file}: never deployed")
    rc, out, err = module.run_command(
        ["docker", "compose", "-p", p["project"], "--project-directory", p["compose_dir"], "-f", compose_file]
        + ["config", "--format", "json"]
    )
    if rc != 0:
        module.fail_json(msg=f"cannot read the rendered compose project {compose_file}: {err.strip()[-500:]}")
    spec = json.loads(out)["services"][p["service"]]
    rc, out, _ = module.run_command(["docker", "inspect", p["container"]])
    if rc != 0:
        module.exit_json(changed=False, drift=[], state=None, fields=FIELDS)
    container = json.loads(out)[0]
    rc, out, _ = module.run_command(["docker", "image", "inspect", spec.get("image", "")])
    image = json.loads(out)[0] if rc == 0 else {}
    module.exit_json(
        changed=False,
        drift=compare(spec, container, image),
        state=container.get("State", {}).get("Status"),
        fields=FIELDS,
    )


if __name__ == "__main__":
    main()
