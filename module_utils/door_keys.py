"""Who may pass the head's front door: the operator's key and the named tenants' keys, each as its SHA-256 digest.

The door (roles/front_door) compares the digest of the presented key with these digests, never the key's own bytes,
so the comparison leaks nothing about a key through its time, and the door's files hold no key. Pure: the caller
reads the key files and passes their text (None: no such file).

A router's door also takes admin credentials for its admin API: the admin key (the controller's: any replica URL)
and, per replica, a credential derived from it that lets that replica's head add or remove its own URL only.
"""

import hashlib
import hmac
import os
import re
import shlex

OPERATOR = "operator"  # the tenant of front_door_api_key_file: the controller's gate, benchmark and warm-up use it
NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # an nginx variable and zone name part
KEY = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")  # a bearer token
LIMITS = ("requests_per_minute", "burst", "max_concurrent")


def create_key_command(path):
    """The command that creates the key file `path`, as a refusal prints it: pasted as is it works in a fresh clone
    too, where `.spark-serve/` does not exist yet, and leaves the shell's own umask alone."""
    folder = shlex.quote(os.path.dirname(path) or ".")
    return f"(umask 077 && mkdir -p {folder} && openssl rand -hex 32 > {shlex.quote(path)})"


def key_violations(field, path, text):
    """Why the key file `path` cannot be a door key (empty: it can)."""
    if text is None:
        return [
            f"{field}={path}: no such file on the controller (rule: the key is read from a file there; create it "
            f"once: `{create_key_command(path)}`)"
        ]
    if not KEY.match(text.strip()):
        return [
            f"{field}={path}: the key must be 16 to 512 letters, digits or ._~+/=- (rule: a bearer token; e.g. "
            "`openssl rand -hex 32`)"
        ]
    return []


def limit_violations(field, tenant):
    found = []
    for limit in LIMITS:
        value = tenant.get(limit, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            found.append(f"{field}.{limit}={value!r}: not a whole number of 0 or more (rule: 0 = no limit)")
    burst = tenant.get("burst", 0)
    if not found and burst > 0 and not tenant.get("requests_per_minute", 0):
        found.append(
            f"{field}.burst={tenant['burst']}: a burst without requests_per_minute (rule: the burst is the "
            "number of requests over the rate that wait their turn)"
        )
    return found


def name_violations(field, name, seen):
    if not isinstance(name, str) or not NAME.match(name):
        return [
            f"{field}.name={name!r}: not a tenant name (rule: a lowercase letter, then up to 31 lowercase "
            "letters, digits or _)"
        ]
    if name == OPERATOR:
        return [
            f"{field}.name={name!r}: reserved for the operator's key, front_door_api_key_file (rule: every "
            "tenant has a name of its own)"
        ]
    if name in seen:
        return [f"{field}.name={name!r}: named twice (rule: one entry per tenant; revoke with revoked: true)"]
    return []


def door_entry(name, text, tenant=None):
    tenant = tenant or {}
    return {
        "name": name,
        "sha256": hashlib.sha256(text.strip().encode()).hexdigest(),
        **{limit: tenant.get(limit, 0) for limit in LIMITS},
    }


def door_keys(api_key_file, api_key_text, tenants, tenant_texts, field="front_door_tenants"):
    """(entries, revoked, violations): the door's entries (operator first, no limits; then every tenant not
    revoked) with each key's digest, the revoked tenants' names, and every violation at once. `tenant_texts[i]` is
    the text of `tenants[i]['key_file']` (None: missing)."""
    entries, revoked, violations = [], [], []
    if api_key_file:
        found = key_violations("front_door_api_key_file", api_key_file, api_key_text)
        violations += found
        if not found:
            entries.append(door_entry(OPERATOR, api_key_text))
    seen = set()
    for index, (tenant, text) in enumerate(zip(tenants, tenant_texts, strict=True)):
        at = f"{field}[{index}]"
        found = name_violations(at, tenant.get("name"), seen) + limit_violations(at, tenant)
        seen.add(tenant.get("name"))
        if tenant.get("revoked", False):
            violations += found
            revoked.append(tenant.get("name"))
            continue
        found += key_violations(f"{at}.key_file", tenant.get("key_file"), text)
        violations += found
        if not found:
            entries.append(door_entry(tenant["name"], text, tenant))
    return entries, revoked, violations + shared_key_violations(entries, field)


def shared_key_violations(entries, field):
    """Two names for one key: revoking either would leave the key working."""
    by_digest = {}
    for entry in entries:
        by_digest.setdefault(entry["sha256"], []).append(entry["name"])
    return [
        f"{field}: {' and '.join(names)} have the same key (rule: one key per tenant, so that each can be revoked "
        "alone)"
        for names in by_digest.values()
        if len(names) > 1
    ]


def member_credential(admin_key, url):
    """A replica head's own credential at the router's door: an HMAC of its URL under the admin key, so the head
    holds no key that would let it name another replica, and the controller derives it again at will."""
    return hmac.new(admin_key.strip().encode(), url.encode(), hashlib.sha256).hexdigest()


def admin_entries(admin_key_file, admin_key_text, members, field="front_door_admin_members"):
    """(entries, violations): the router door's admin entries, the admin key's digest with the scope '*' (any URL),
    then each member credential's digest with its URL as the scope; members must be https:// URLs (the router
    verifies every replica with the fleet's CA)."""
    violations = key_violations("front_door_admin_key_file", admin_key_file, admin_key_text)
    violations += [
        f"{field}[{index}]={url!r}: not an https:// URL (rule: the router reaches every replica over TLS verified by "
        "the fleet's CA)"
        for index, url in enumerate(members)
        if not (isinstance(url, str) and url.startswith("https://") and len(url) > len("https://"))
    ]
    if violations:
        return [], violations
    entries = [{"sha256": hashlib.sha256(admin_key_text.strip().encode()).hexdigest(), "scope": "*"}]
    entries += [
        {"sha256": hashlib.sha256(member_credential(admin_key_text, url).encode()).hexdigest(), "scope": url}
        for url in members
    ]
    return entries, []
