"""What a refusal of a vLLM engine profile is, and what the engine_* rule sets share to collect them.

Pure Python (stdlib only). Every violation names the field, the value and the rule; all of them are returned at once.
"""

from ansible.module_utils.redaction import REDACTED, is_secret_name, redact


def violation(field, value, rule, message):
    """One refusal; a secret inside the value (`INFO\nVLLM_API_KEY=...`) is hidden in it and in the message."""
    value = REDACTED if is_secret_name(field) and isinstance(value, str) and value else redact(value)
    return {"field": field, "value": value, "rule": rule, "message": redact(f"{field}={value!r}: {message}")}


class RuleChecks:
    """The base of every rule set of one rank's plan: the vllm_args parameters, and the violations and warnings."""

    def __init__(self, params):
        self.p = params
        self.violations = []
        self.warnings = []

    def fail(self, field, value, rule, message):
        self.violations.append(violation(field, value, rule, message))


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)
