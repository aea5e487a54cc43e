"""What is a secret, and how it is hidden: the one definition that refusals, records, drift reports and schema
errors all use, so that what one layer hides no other layer prints.

Pure Python (stdlib only) so that plain pytest can test it.
"""

import json
import re

REDACTED = "<redacted>"

# A name carries a credential when one of its words (split at `_`, `-`, `.`) ends in one of these or holds APIKEY,
# SECRET or PASSWORD: VLLM_API_KEY, HF_TOKEN, HFTOKEN, OPENAI_APIKEY_FILE, DB_PASSWORD. Plural TOKENS is a count
# (max_num_batched_tokens), never a secret.
SECRET_WORD = re.compile(r"(KEY|KEYS|TOKEN|SECRETS?|PASSWORD|PASSWD|CREDENTIALS?)$|APIKEY|SECRET|PASSWORD", re.I)
# An assignment of a secret-named variable inside a text (`VLLM_API_KEY=abc`, `hf_token: abc`).
ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>\s*[=:]\s*)(?P<value>[^\s'\",;]+)")
# A credential in an HTTP header or a command line: `Bearer abc`, `--api-key abc`, `--hf-token=abc`.
BEARER = re.compile(r"(?P<lead>\bBearer\s+)[^\s'\",;]+", re.IGNORECASE)
SECRET_OPTION = re.compile(r"(?P<lead>--(?:api-key|hf-token)(?:=|\s+))[^\s'\",;]+", re.IGNORECASE)


def is_secret_name(name):
    """True when a variable, field or argument name looks like it carries a credential (VLLM_API_KEY), not a
    reference to one (api_key_file: a path is shown so that a missing file can be named)."""
    words = [word for word in re.split(r"[_.\-\s\[\]]+", str(name)) if word]
    if words and words[-1].lower() in ("file", "path", "dir"):
        return False
    return any(SECRET_WORD.search(word) for word in words)


def mentions_secret(value):
    """True when any name-like word anywhere in `value` (keys and texts alike) is secret-named."""
    return any(is_secret_name(word) for word in re.findall(r"[A-Za-z0-9_]+", json.dumps(value, default=str)))


def redact_text(text, secrets=()):
    """`text` with every known secret, every secret-named assignment, bearer token and secret option hidden."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = ASSIGNMENT.sub(
        lambda m: f"{m['name']}{m['sep']}{REDACTED}" if is_secret_name(m["name"]) else m[0],
        text,
    )
    text = BEARER.sub(lambda m: m["lead"] + REDACTED, text)
    return SECRET_OPTION.sub(lambda m: m["lead"] + REDACTED, text)


def redact(value, secrets=()):
    """A copy of `value` with secret-named text entries replaced and every other string passed through redact_text."""
    if isinstance(value, dict):
        return {
            key: REDACTED
            if is_secret_name(key) and isinstance(item, str) and item  # a count (last_token_s: 1.2) is no secret
            else redact(item, secrets)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):  # an argv: the item after `--api-key` is the key
        return [
            REDACTED if index and SECRET_OPTION.fullmatch(f"{value[index - 1]} x") else redact(item, secrets)
            for index, item in enumerate(value)
        ]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value
