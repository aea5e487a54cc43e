#!/usr/bin/python
"""Ansible module: every rank's argv parsed by the pinned image's own vLLM before any rank starts."""

DOCUMENTATION = r"""
---
module: vllm_image_parser
short_description: Parse every rank's argv with the pinned image's own vLLM parser, before any rank starts
description:
  - Runs one throw-away container of the image (C(docker run --rm --network none --pull never), entrypoint
    C(python3)) that builds C(vllm)'s CLI parser as C(vllm serve) does and parses each rank's argv; an unknown or
    mistyped flag fails naming the rank, argparse's own error and the image's vLLM version, for any version
    (a nightly included) and whatever the project's flag catalogs know (module_utils/image_parser.py).
  - A vLLM that does not import fails in one line naming the image, the exception's own line with the vLLM file
    and line it names (such as C(vllm/platforms/cpu.py), line 412) and the patches the image applied (its
    C(/opt/spark-serve/image/provenance.json)) as the likely cause; the traceback is returned apart.
  - A passed check is remembered in O(cache_dir) by the image id and the argv, so a restart of the same
    configuration does not import vLLM again; nothing else is written.
options:
  image:
    description: The image the ranks run (the profile's image.ref).
    type: str
    required: true
  argvs:
    description: Each rank's full command (C(vllm serve <model> ...)), rank 0 first.
    type: list
    elements: list
    required: true
  hosts:
    description: Each rank's host, in the order of O(argvs) (messages name C(rank <N> (<host>))).
    type: list
    elements: str
    required: true
  cache_dir:
    description: Folder on the node where passed checks are remembered.
    type: path
    required: true
  engine_version:
    description:
      - The profile's C(engine_version); when given, the image's vLLM must be that release (a local part such as
        C(+cpu) aside), else the check fails naming both, before any rank starts.
    type: str
  timeout:
    description: Seconds the container may take (importing vLLM takes about 10 s).
    type: int
    default: 300
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Parse every rank's argv with the image's own vLLM
  vllm_image_parser:
    image: spark-serve/gb10:0123456789abcdef
    argvs: [[vllm, serve, nvidia/Qwen3.8-Flash-Next-NVFP4, --max-num-seqs, "2"]]
    hosts: [spark-a]
    cache_dir: /var/lib/spark-serve/vllm/parser-checks
"""

RETURN = r"""
version:
  description: vLLM's version as the image reports it (its installed distribution's metadata).
  returned: always
  type: str
  sample: 0.33.0
cached:
  description: True when this image and argv passed before and vLLM was not run again.
  returned: always
  type: bool
refused:
  description: One line per rank whose argv the image's parser refused (empty on success).
  returned: always
  type: list
  elements: str
traceback:
  description: The image's full traceback when its vLLM did not import (or its error output when python3 did not
    start); the message carries its last line.
  returned: when vLLM did not import or the parser could not run
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.image_parser import (
    PARSE_SCRIPT,
    PROVENANCE,
    answer,
    check_key,
    import_failure,
    last_line,
    refusals,
    version_problem,
)


def image_id(module, image):
    rc, out, err = module.run_command(["docker", "image", "inspect", "--format", "{{.Id}}", image])
    if rc != 0:
        module.fail_json(
            msg=f"the image {image} is not on this node; nothing was started: `ansible-playbook site.yml` (its "
            f"prepare play) builds or pulls it on every node ({err.strip()})"
        )
    return out.strip()


def exit_checked(module, cached, version):
    """The argv passed; the image's release must still be the profile's (a cached pass is judged again)."""
    wanted = module.params["engine_version"]
    problem = version_problem(wanted, version) if wanted else None
    if problem:
        module.fail_json(msg=f"{problem}; nothing was started", cached=cached, refused=[], version=version)
    module.exit_json(changed=False, cached=cached, refused=[], version=version)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            argvs=dict(type="list", elements="list", required=True),
            hosts=dict(type="list", elements="str", required=True),
            cache_dir=dict(type="path", required=True),
            engine_version=dict(type="str"),
            timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    argvs = [[str(token) for token in argv] for argv in p["argvs"]]
    stamp = os.path.join(p["cache_dir"], check_key(image_id(module, p["image"]), argvs))
    if os.path.isfile(stamp):
        with open(stamp, encoding="utf-8") as handle:
            exit_checked(module, cached=True, version=json.load(handle)["version"])
    command = ["timeout", str(p["timeout"]), "docker", "run", "--rm", "--network", "none", "--pull", "never"]
    command += ["--entrypoint", "python3", p["image"], "-c", PARSE_SCRIPT, json.dumps(argvs), PROVENANCE]
    rc, out, err = module.run_command(command)
    parsed = answer(out)
    if parsed is None:
        module.fail_json(
            msg=f"cannot run the image's own vLLM parser in {p['image']} (python3 or vLLM did not start, rc {rc}); "
            f"nothing was started: {last_line(err or out)}",
            cached=False,
            refused=[],
            version="",
            traceback=err or out,
        )
    if "import_error" in parsed:
        module.fail_json(
            msg=import_failure(p["image"], parsed),
            cached=False,
            refused=[],
            version=parsed["version"],
            traceback=parsed["import_error"]["traceback"],
        )
    refused = refusals(parsed, [f"rank {rank} ({host})" for rank, host in enumerate(p["hosts"])])
    if refused:
        module.fail_json(
            msg=f"{len(refused)} rank(s) refused by the image's own vLLM parser; nothing was started: "
            + " | ".join(refused),
            cached=False,
            refused=refused,
            version=parsed["version"],
        )
    if not module.check_mode:
        os.makedirs(p["cache_dir"], exist_ok=True)
        with open(stamp, "w", encoding="utf-8") as handle:
            json.dump({"version": parsed["version"], "image": p["image"]}, handle)
    exit_checked(module, cached=False, version=parsed["version"])


if __name__ == "__main__":
    main()
