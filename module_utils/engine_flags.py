"""One engine argument to `vllm serve` argv: the flag catalog's canonical spelling, type and bound checks, the
arguments a profile may never set, and one refusal for each duplicate.

Pure Python (stdlib only); engine_extra_args reads raw extra_args on top of it.
"""

import difflib
import json
import re

from ansible.module_utils.engine_refusals import violation
from ansible.module_utils.input_rules import RANK_DESTS, SECRET_DESTS, has_newline, value_problem
from ansible.module_utils.redaction import REDACTED, is_secret_name


class FlagRenderer:
    """Collects argv, parsed values and violations for one rank of one profile."""

    def __init__(self, catalog, deferred=False):
        self.catalog = catalog
        self.deferred = deferred  # no catalog of the engine's own version: unknown flags are the image's to judge
        self.flags = catalog["FLAGS"]
        self.version = catalog["ENGINE_VERSION"]
        self.by_option = {}
        for dest, spec in self.flags.items():
            for opt in spec["options"] + spec["negatives"]:
                self.by_option[opt] = dest
        self.argv = []
        self.values = {}  # dest -> parsed value, what the engine will see
        self.violations = []
        self.seen = {}  # dest -> field that set it

    def fail(self, field, value, rule, message):
        self.violations.append(violation(field, value, rule, message))

    def prefix_matches(self, option):
        return sorted(o for o in self.by_option if o.startswith(option))

    def canonical_option(self, option):
        """The option string vLLM's parser resolves `option` to: underscores are dashes, and a unique prefix
        of a long option is that option (argparse allow_abbrev)."""
        if option in self.by_option:
            return option
        if not option.startswith("--"):
            return None
        option = "--" + option[2:].replace("_", "-")
        if option in self.by_option:
            return option
        matches = self.prefix_matches(option)
        return matches[0] if len(matches) == 1 else None

    def dest_for_option(self, option):
        canonical = self.canonical_option(option)
        return self.by_option[canonical] if canonical else None

    def dest_for_key(self, key):
        """An engine mapping key: a vLLM dest (`max_num_seqs`) or a flag spelling (`max-num-seqs`)."""
        if key in self.flags:
            return key
        for spelling in ("--" + key.replace("_", "-"), "-" + key):
            if spelling in self.by_option:
                return self.by_option[spelling]
        return None

    def claim(self, dest, field, value):
        if dest in self.seen:
            self.fail(
                field,
                value,
                "duplicate-option",
                f"sets --{dest.replace('_', '-')} which {self.seen[dest]} already sets; vLLM keeps only "
                "the last occurrence, so one of them would be silently ignored",
            )
            return False
        self.seen[dest] = field
        return True

    def unknown(self, field, value, name):
        if self.deferred:  # the image's own parser judges it; a secret's name is refused here all the same
            if not self.secret_unknown(field, name):
                self.argv.extend(generic_tokens(name, value))
            return
        near = difflib.get_close_matches(name, list(self.flags), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        self.fail(
            field, value, "unknown-flag", f"vLLM {self.version} has no engine argument '{name}' (flag catalog){hint}"
        )

    def secret_unknown(self, field, name):
        """A flag no catalog knows that names a secret (a nightly's --new-api-key): refused like a known one."""
        if not is_secret_name(name):
            return False
        self.fail(
            field,
            REDACTED,
            "secret-in-argv",
            f"--{name.replace('_', '-')} in argv shows in every process "
            "list, compose file and record; use api_key_file",
        )
        return True

    def refused_dest(self, dest, field, value):
        """True (and a violation) for arguments the profile may never set: secrets and rank topology."""
        if dest in SECRET_DESTS:
            self.fail(
                field,
                REDACTED,
                "secret-in-argv",
                f"--{dest.replace('_', '-')} in argv shows in every process list, compose file and record; "
                "use api_key_file",
            )
            return True
        if dest in RANK_DESTS:
            self.fail(
                field,
                value,
                "rank-args",
                f"--{dest.replace('_', '-')} is decided per rank from the inventory (spark_nodes, its order "
                "and the head's fast-link address); remove it from the profile",
            )
            return True
        return False

    def add(self, key, value, field, trusted=False):
        """One engine mapping entry; `trusted` entries come from the inventory (rank flags)."""
        dest = self.dest_for_key(key)
        if dest is None:
            self.unknown(field, value, key)
            return
        if (not trusted and self.refused_dest(dest, field, value)) or not self.claim(dest, field, value):
            return
        self.render(dest, value, field, value)

    def render(self, dest, value, field, shown):
        """Append one flag in the catalog's canonical spelling after type and bound checks."""
        if has_newline(value) or (isinstance(value, list) and any(has_newline(v) for v in value)):
            self.fail(field, shown, "no-newline", "must not contain a line break (it would split the argument)")
            return
        tokens, problem = render_value(self.flags[dest], value)
        if problem:
            self.fail(field, shown, "flag-type", f"{problem} (vLLM {self.version})")
            return
        bound = value_problem(dest, parsed_value(self.flags[dest], value))
        if bound:
            self.fail(field, shown, bound[0], bound[1])
            return
        self.argv.extend(tokens)
        self.values[dest] = parsed_value(self.flags[dest], value)


def generic_tokens(name, value):
    """An engine argument no catalog knows, spelled as vLLM spells its own: --dashed-name, booleans as --x / --no-x,
    mappings as JSON."""
    option = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [option if value else "--no-" + option[2:]]
    if value is None:
        return []
    if isinstance(value, dict):
        return [option, json.dumps(value, separators=(",", ":"), sort_keys=True)]
    if isinstance(value, list):
        return [option] + [str(item) for item in value]
    return [option, str(value)]


def parsed_value(spec, value):
    """The value as the engine will hold it (JSON text parsed)."""
    if spec["kind"] == "json" and isinstance(value, str):
        return coerce("json", value)
    return value


def render_value(spec, value):
    """(argv tokens, problem) for one flag and one profile value, following the catalog's kind."""
    option = spec["options"][0] if spec["options"] else None
    kind = spec["kind"]
    if kind == "bool":
        if not isinstance(value, bool):
            return [], f"must be true or false, got {type(value).__name__}"
        if value == spec.get("store", True):
            return [option or spec["negatives"][0]], None
        # The spelling this version shows in --help (0.33: --disable-X; up to 0.32: --no-X).
        negatives = sorted(spec["negatives"], key=lambda o: o in spec.get("hidden", []))
        # store_true flag set to false (or store_false set to true) is the default: nothing to render.
        return ([negatives[0]] if negatives else []), None
    if value is None:
        if spec.get("default", "unset") is None:
            return [], None  # None is the engine default: same as not rendering the flag
        if spec.get("accepts_none"):
            return [option, "None"], None
        return [], "does not accept None"
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as err:
                return [], f"is not valid JSON ({err})"
        if not isinstance(value, dict):
            return [], "must be a mapping (JSON object)"
        return [option, json.dumps(value, separators=(",", ":"), sort_keys=True)], None
    if kind == "list":
        items = value if isinstance(value, list) else [value]
        bad = [v for v in items if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
        if bad:
            return [], f"items must be scalars, got {bad!r}"
        return [option] + [str(v) for v in items], check_choices(spec, items)
    if isinstance(value, (dict, list, bool)):
        return [], f"must be a {kind}, got {type(value).__name__}"
    if kind == "int":
        if isinstance(value, float) or not re.fullmatch(r"-?\d+", str(value)):
            return [], f"must be an integer, got {value!r}"
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            return [], f"must be a number, got {value!r}"
    return [option, format_scalar(value)], check_choices(spec, [value])


def format_scalar(value):
    if isinstance(value, float):
        return repr(value)
    return str(value)


def check_choices(spec, items):
    choices = spec.get("choices")
    if choices and any(str(v) not in choices for v in items):
        return f"must be one of {choices}"
    return None


def coerce(kind, raw):
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "json":
            return json.loads(raw)
    except ValueError:
        return raw
    return raw
