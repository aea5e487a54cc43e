"""A profile's extra_args, raw strings read the way vLLM's FlexibleArgumentParser reads them: abbreviations,
booleans, -O levels and dotted keys of JSON flags.

Pure Python (stdlib only).
"""

from ansible.module_utils.engine_flags import FlagRenderer, coerce
from ansible.module_utils.input_rules import SECRET_DESTS, has_newline
from ansible.module_utils.redaction import REDACTED

BOOL_WORDS = ("true", "false", "yes", "no", "0", "1", "on", "off")


class ArgvRenderer(FlagRenderer):
    """FlagRenderer that also reads raw extra_args."""

    def __init__(self, catalog, deferred=False):
        super().__init__(catalog, deferred)
        self.dash_o = (catalog.get("CLI_SYNTAX") or {}).get("dash_O") or []
        self.dotted = {}  # dest -> (field, merged mapping) from --json-flag.key value

    def add_raw(self, raw_args, field):
        """Extra args given as raw strings, read the way vLLM's FlexibleArgumentParser reads them."""
        tokens = [str(t) for t in raw_args]
        i = 0
        while i < len(tokens):
            i = self.add_raw_option(tokens, i, f"{field}[{i}]")
        for dest, (item_field, merged) in self.dotted.items():
            if self.claim(dest, item_field, merged):
                self.render(dest, merged, item_field, merged)

    def add_raw_option(self, tokens, i, item_field):
        """Read the option at tokens[i] (and its values); returns the index of the next option."""
        token = tokens[i]
        if has_newline(token):
            self.fail(item_field, token, "no-newline", "must not contain a line break")
            return i + 1
        if token.startswith("-O") and not token.startswith("--") and self.dash_o:
            return self.add_dash_o(tokens, i, item_field)
        option, _, inline = token.partition("=")
        if not option.startswith("-"):
            self.fail(item_field, token, "extra-args-shape", "expected an option starting with '-'")
            return i + 1
        if "." in option and option.startswith("--"):
            return self.add_dotted(tokens, i, item_field)
        dest = self.dest_for_option(option)
        if dest is None and self.deferred:
            if not self.secret_unknown(item_field, option.lstrip("-").replace("-", "_")):
                self.argv.extend(tokens[i : skip_values(tokens, i + 1)])  # as given: the image's parser judges it
            return skip_values(tokens, i + 1)
        if dest is None:
            self.unresolved(option, item_field, token)
            return skip_values(tokens, i + 1)
        spec = self.flags[dest]
        if spec["kind"] == "bool":
            return self.add_raw_bool(tokens, i, item_field, dest)
        values, i = raw_values(tokens, i + 1, inline, spec)
        shown = REDACTED if dest in SECRET_DESTS else token
        if self.refused_dest(dest, item_field, shown) or not self.claim(dest, item_field, shown):
            return i
        if not values:
            self.fail(item_field, token, "flag-type", f"{option} needs a value")
            return i
        value = values if spec["kind"] == "list" else coerce(spec["kind"], values[0])
        self.render(dest, value, item_field, token)
        return i

    def unresolved(self, option, item_field, token):
        """An option the catalog cannot resolve: ambiguous prefix or unknown. Its value is never echoed."""
        shown = option + ("=..." if "=" in token else "")
        spelled = "--" + option[2:].replace("_", "-") if option.startswith("--") else option
        candidates = self.prefix_matches(spelled) if spelled.startswith("--") else []
        if len(candidates) > 1:
            self.fail(
                item_field,
                shown,
                "ambiguous-option",
                f"{option} is an abbreviation of {len(candidates)} options in vLLM {self.version} "
                f"({', '.join(candidates[:8])}{', ...' if len(candidates) > 8 else ''}); the engine refuses "
                "it; spell the option out",
            )
        else:
            self.unknown(item_field, shown, option.lstrip("-").replace("-", "_"))

    def add_raw_bool(self, tokens, i, item_field, dest):
        """A boolean flag takes no value: argparse refuses `--flag=false`, and `--flag false` leaves a stray
        positional. Both are refused here rather than rendered as the bare flag (which would invert them)."""
        token = tokens[i]
        option, has_inline, inline = token.partition("=")
        spec = self.flags[dest]
        follower = tokens[i + 1] if i + 1 < len(tokens) else None
        stray = follower is not None and follower.lower() in BOOL_WORDS
        if has_inline or stray:
            value = inline if has_inline else follower
            positive, negative = spec["options"][:1], sorted(spec["negatives"])[:1]
            spellings = " or ".join(positive + negative) or option
            self.fail(
                item_field,
                f"{option} {value}" if stray else token,
                "bool-takes-no-value",
                f"vLLM {self.version}'s parser reads no value after a boolean flag (it refuses "
                f"'{option}={value}' or keeps '{value}' as a stray argument); write {spellings}, or set "
                f"engine.{dest}: true/false",
            )
            return i + (2 if stray else 1)
        if self.refused_dest(dest, item_field, token) or not self.claim(dest, item_field, token):
            return i + 1
        stored = spec.get("store", True)
        value = not stored if self.canonical_option(option) in spec["negatives"] else stored
        self.render(dest, value, item_field, token)
        return i + 1

    def add_dash_o(self, tokens, i, item_field):
        """-O3, -O=3 and -O 3 are the optimization level (FlexibleArgumentParser rewrites them)."""
        token = tokens[i]
        if token == "-O":
            if i + 1 >= len(tokens):
                self.fail(item_field, token, "flag-type", "-O needs a level")
                return i + 1
            level, nxt = tokens[i + 1], i + 2
        else:
            level, nxt = token[3:] if token[2:3] == "=" else token[2:], i + 1
        dest = self.dash_o[0]
        if self.claim(dest, item_field, token):
            self.render(dest, coerce(self.flags[dest]["kind"], level), item_field, token)
        return nxt

    def add_dotted(self, tokens, i, item_field):
        """--speculative-config.num_speculative_tokens 4: one key of a JSON flag, merged like vLLM merges it."""
        token = tokens[i]
        option, has_inline, inline = token.partition("=")
        base, *keys = option.split(".")
        dest = self.dest_for_option(base)
        if dest is None or self.flags[dest]["kind"] != "json" or not all(keys):
            self.fail(item_field, token, "dotted-json-key", f"{base} is not a JSON config flag of vLLM {self.version}")
            return i + 1
        if not has_inline and i + 1 >= len(tokens):
            self.fail(item_field, token, "flag-type", f"{option} needs a value")
            return i + 1
        raw, nxt = (inline, i + 1) if has_inline else (tokens[i + 1], i + 2)
        value = coerce("json", raw)
        field, merged = self.dotted.setdefault(dest, (item_field, {}))
        node = merged
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                break
        if not isinstance(node, dict) or keys[-1] in node:
            self.fail(item_field, token, "duplicate-option", f"{option} is already set by {field}")
        else:
            node[keys[-1]] = value
        return nxt


def raw_values(tokens, i, inline, spec):
    """The values that follow an option in raw args, and the index after them."""
    if inline:
        return [inline], i
    values = []
    while i < len(tokens) and not (tokens[i].startswith("-") and values):
        values.append(tokens[i])
        i += 1
        if spec.get("nargs") not in ("+", "*"):
            break
    return values, i


def skip_values(tokens, i):
    """Index of the next option after an unresolved one (its values are not reported on their own)."""
    while i < len(tokens) and not tokens[i].startswith("-"):
        i += 1
    return i
