"""The door certificate's names and the CA's name constraints (pure; roles/front_door/library/front_door_names.py).

A head's certificate names its address, its inventory name, loopback and the operator's extra names
(front_door_names). The controller's CA may sign those names only: its certificate carries critical name
constraints (RFC 5280 permitted subtrees), so its key, if stolen, vouches for no other site. The constraints only
grow: the CA is shared by every inventory of one controller (a fleet's replicas, its router), each run adds its
head's names to what the CA already permits and never drops another inventory's.
"""

import ipaddress
import re

DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")  # "_" as Ansible inventory names often have


def dns_name_problem(name):
    """Why `name` is not a DNS name a certificate can carry (a leading `*.` is a wildcard), or None."""
    labels = (name[2:] if name.startswith("*.") else name).split(".")
    if len(name) > 253 or not all(DNS_LABEL.match(label) for label in labels):
        return "letters, digits, _ and inner hyphens in dot-separated labels of 1-63 characters (a leading *. allowed)"
    return None


def general_name(name):
    """('IP:<address>' or 'DNS:<name>', violation or None) for one certificate name."""
    try:
        return f"IP:{ipaddress.ip_address(name).compressed}", None
    except ValueError:
        problem = dns_name_problem(name)
        return f"DNS:{name.lower()}", problem and (
            f"front_door_names (with ansible_host and the inventory name): {name!r} is no IP address and no DNS name"
            f" (rule: {problem})"
        )


def permitted_subtree(san):
    """The name-constraint subtree that permits exactly one SAN: an address as its own /32 (/128) network, a name
    with its subdomains (a wildcard's base domain)."""
    kind, value = san.split(":", 1)
    if kind == "IP":
        return f"IP:{ipaddress.ip_network(value).compressed}"
    return f"DNS:{value[2:] if value.startswith('*.') else value}"


def door_names(names, permitted):
    """(sans, permitted subtrees, violations): the head's SANs in order without repeats; the CA's subtrees, sorted,
    the ones it already permits (`permitted`, from its certificate) plus one per SAN."""
    sans, violations = [], []
    for name in names:
        san, problem = general_name(str(name))
        if problem:
            violations.append(problem)
        elif san not in sans:
            sans.append(san)
    subtrees = set(permitted or []) | {permitted_subtree(san) for san in sans}
    return sans, sorted(subtrees), violations
