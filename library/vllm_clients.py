#!/usr/bin/python
"""Ansible module: how a client reaches the service (endpoint, served model name, curl and OpenAI SDK commands)."""

DOCUMENTATION = r"""
---
module: vllm_clients
short_description: Describe how clients reach the vLLM service, with commands that work as printed
description:
  - Returns the lines a deploy prints last, from module_utils/client_examples.py, the endpoint's C(/v1) URL,
    the served model name, a C(curl) command and an OpenAI SDK (Python) command that trust the front door's CA
    (C(--cacert), C(SSL_CERT_FILE)) and read the API key from its file, and how to add the CA to a machine's trust
    store.
  - The key itself is never read; the commands name its file, and read it so that it never lands on a command line
    (bash).
  - Runs on the controller.
options:
  url:
    description: The service's base URL without C(/v1) (the front door's C(https://<head>:<port>), or vLLM's own).
    type: str
    required: true
  model:
    description: The served model name clients ask for.
    type: str
    required: true
  ca_file:
    description: The CA file clients trust (the front door's), or empty when the service speaks plain HTTP.
    type: str
    default: ""
  api_key_file:
    description: The API key's file on the controller, or empty when the service takes no key.
    type: str
    default: ""
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Say how clients reach the service
  vllm_clients:
    url: https://spark-a.local:8443
    model: qwen3.8-flash-next
    ca_file: /home/me/spark-serve/.spark-serve/front-door/ca.pem
    api_key_file: /home/me/spark-serve/.spark-serve/api-key
  register: clients
"""

RETURN = r"""
lines:
  description: What to print, in order, the endpoint and model, the key and CA files, the curl and SDK commands,
    the trust-store commands.
  returned: always
  type: list
  elements: str
base_url:
  description: The URL clients use (C(<url>/v1)).
  returned: always
  type: str
  sample: https://spark-a.local:8443/v1
curl:
  description: The curl command (bash), one chat completion.
  returned: always
  type: str
sdk:
  description: The OpenAI SDK command (bash, Python 3 with the C(openai) package), the same request.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.client_examples import client_lines, curl_command, sdk_command


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model=dict(type="str", required=True),
            ca_file=dict(type="str", default=""),
            api_key_file=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base_url = p["url"].rstrip("/") + "/v1"
    files = [os.path.normpath(path) if path else "" for path in (p["ca_file"], p["api_key_file"])]
    module.exit_json(
        changed=False,
        lines=client_lines(p["url"], p["model"], *files),
        base_url=base_url,
        curl=curl_command(base_url, p["model"], *files),
        sdk=sdk_command(base_url, p["model"], *files),
    )


if __name__ == "__main__":
    main()
