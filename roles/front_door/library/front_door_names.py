#!/usr/bin/python
"""Ansible module: the head certificate's names and the CA's name constraints (module_utils/door_names.py)."""

DOCUMENTATION = r"""
---
module: front_door_names
short_description: The door certificate's subject alternative names and the names its CA may sign
description:
  - Turns the head's names (its address, inventory name, loopback, the operator's C(front_door_names)) into the
    certificate's subject alternative names, C(IP:) for an address and C(DNS:) otherwise, without repeats.
  - Returns the CA's permitted subtrees (RFC 5280 name constraints) - what the CA permits already plus one subtree per
    name - so that the CA signs the deployment's names only and a run never drops a name another inventory of the
    same controller needs.
  - Lists every name that is neither an address nor a DNS name at once, and a CA certificate it cannot read. Changes
    nothing.
options:
  names:
    description: The head's names, in the order the certificate lists them.
    type: list
    elements: str
    required: true
  ca_file:
    description:
      - The CA's certificate on the controller; the names it permits now are kept. A missing file (the first run)
        permits none yet. Read with the Python C(cryptography) package that community.crypto needs anyway.
    type: path
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the head's certificate names and the CA's constraints
  front_door_names:
    names: ["10.0.0.5", "spark-a", "127.0.0.1", "localhost"]
    ca_file: "{{ front_door_ca_dir }}/ca.pem"
  delegate_to: localhost
  register: front_door_names_judged
"""

RETURN = r"""
sans:
  description: The certificate's subject alternative names, in order, e.g. C(IP:10.0.0.5) and C(DNS:spark-a).
  returned: always
  type: list
  elements: str
permitted:
  description: The CA's permitted subtrees, sorted, e.g. C(IP:10.0.0.5/32) and C(DNS:spark-a).
  returned: always
  type: list
  elements: str
violations:
  description: One line per name that no certificate can carry, naming the value and the rule.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.door_names import door_names

try:
    from cryptography import x509
except ImportError:
    x509 = None


def general_name_text(name):
    """A permitted subtree as community.crypto writes one: DNS:<name>, IP:<network>."""
    return f"IP:{name.value.compressed}" if isinstance(name, x509.IPAddress) else f"DNS:{name.value}"


def permitted_now(module, ca_file):
    """The CA certificate's permitted subtrees ([] before its first certificate, or when it has none)."""
    if not os.path.exists(ca_file):
        return []
    try:
        with open(ca_file, "rb") as pem:
            certificate = x509.load_pem_x509_certificate(pem.read())
        constraints = certificate.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return []
    except (OSError, ValueError) as error:
        module.fail_json(msg=f"front_door_ca_dir: {ca_file} is no readable PEM certificate ({error})")
    return [general_name_text(name) for name in constraints.permitted_subtrees or []]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            ca_file=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    if x509 is None:
        module.fail_json(msg=missing_required_lib("cryptography"))
    permitted = permitted_now(module, module.params["ca_file"])
    sans, permitted, violations = door_names(module.params["names"], permitted)
    module.exit_json(changed=False, sans=sans, permitted=permitted, violations=violations)


if __name__ == "__main__":
    main()
