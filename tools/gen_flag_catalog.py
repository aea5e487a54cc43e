#!/usr/bin/env python3
"""Generate the `vllm serve` flag catalog from vLLM's own argument parser.

Usage (with the engine venv's python, see tests/engine/install_engine.sh):

    .venv-engine/bin/python tools/gen_flag_catalog.py --version 0.32.0 \
        --out module_utils/vllm_flags_0_32_0.py
    .venv-engine/bin/python tools/gen_flag_catalog.py --version 0.33.0 \
        --vllm-src /tmp/w0.33.0 --out module_utils/vllm_flags_0_33_0.py

`--vllm-src DIR` puts DIR (a directory that *contains* an unpacked wheel's `vllm/`
package) first on sys.path, so another vLLM version's pure-python sources are used
on top of the engine venv's third-party packages (torch, transformers, pydantic, ...).
Without it, the vLLM installed in the running interpreter is used.
tools/gen_flag_catalogs.sh downloads the wheels and regenerates all catalogs.

How the parser is built: exactly like `vllm` (vllm/entrypoints/cli/main.py) does it:
a top-level FlexibleArgumentParser, `add_subparsers(dest="subparser")`, and the
`serve` subcommand's own `subparser_init()` from vllm/entrypoints/cli/serve.py, which
calls `make_arg_parser()` (model_tag, --headless, --api-server-count, --config,
--grpc, then FrontendArgs.add_cli_args and AsyncEngineArgs.add_cli_args). The
argparse actions of that serve sub-parser are then walked; nothing is re-declared here.

What is (minimally) done so that another version imports inside this venv:
  * VLLM_TARGET_DEVICE=cpu is forced, so vLLM picks its CPU platform (no GPU, no CUDA
    .so needed); all other VLLM_* variables are removed from the environment so
    env-dependent defaults do not leak into the catalog.
  * The unpacked wheels lack their compiled extensions (vllm/_C*.so etc.). The serve
    parser's import path already tolerates that (vLLM guards those imports), so
    nothing is stubbed for them.
  * A third-party module that the wheel needs but the venv lacks entirely (for
    0.33.0: `orjson`, used only to serialize HTTP responses) is replaced by an inert
    placeholder module, and only when importing the serve CLI actually fails on it:
    the tool then re-executes itself with that module added to the stub list. Stubs
    are never applied to `vllm.*` modules or to modules that are installed, and the
    stubbed names are written into the generated module's docstring. A placeholder
    cannot add, remove or change an argparse action: it only lets an import
    statement succeed; flags come from vLLM's dataclasses and add_argument calls.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

STUB_ENV = "SPARK_GEN_FLAG_CATALOG_STUBS"
MAX_STUBS = 10

# Flags every catalog must contain (the project validates them): generation fails
# without them. distributed_timeout_seconds is reported when absent, not required.
OPTIONAL_CHECKED_FLAGS = ["distributed_timeout_seconds"]
REQUIRED_FLAGS = [
    "tensor_parallel_size",
    "enable_prefix_caching",
    "speculative_config",
    "mamba_ssm_cache_dtype",
    "mamba_cache_dtype",
    "mamba_cache_mode",
    "mamba_block_size",
    "kv_cache_dtype",
    "block_size",
    "prefix_cache_retention_interval",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "compilation_config",
    "enforce_eager",
    "nnodes",
    "node_rank",
    "master_addr",
    "headless",
    "enable_prompt_tokens_details",
    "enable_auto_tool_choice",
    "tool_call_parser",
    "reasoning_parser",
    "api_key",
    "port",
    "host",
    "served_model_name",
    "long_prefill_token_threshold",
]


def log(msg: str) -> None:
    print(f"[gen_flag_catalog] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- import


class _Placeholder:
    """Inert stand-in for anything taken from a stubbed module (subclassable, callable)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Placeholder:
        return _Placeholder()

    def __getattr__(self, name: str) -> _Placeholder:
        return _Placeholder()


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (_Placeholder,), {"__module__": self.__name__})


def _install_stub(name: str) -> None:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        mod_name = ".".join(parts[:i])
        if mod_name not in sys.modules:
            mod = _StubModule(mod_name, "placeholder installed by tools/gen_flag_catalog.py")
            mod.__path__ = []  # type: ignore[attr-defined]
            sys.modules[mod_name] = mod
            if i > 1:
                setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], mod)


def _prepare_environment(vllm_src: str | None) -> list[str]:
    for key in [k for k in os.environ if k.startswith("VLLM_")]:
        del os.environ[key]
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ["VLLM_NO_USAGE_STATS"] = "1"
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
    if vllm_src:
        src = str(Path(vllm_src).resolve())
        if not (Path(src) / "vllm" / "__init__.py").is_file():
            sys.exit(f"--vllm-src {src}: no vllm/__init__.py inside")
        sys.path.insert(0, src)
    stubs = [s for s in os.environ.get(STUB_ENV, "").split(",") if s]
    for name in stubs:
        _install_stub(name)
    return stubs


def _import_serve_cli(stubs: list[str]):
    """Import vllm.entrypoints.cli.serve; on a missing third-party module re-exec with a stub."""
    try:
        return importlib.import_module("vllm.entrypoints.cli.serve")
    except ModuleNotFoundError as e:
        missing = e.name or ""
        top = missing.split(".")[0]
        stubbable = (
            top
            and top != "vllm"
            and missing not in stubs
            and importlib.util.find_spec(top) is None  # not installed at all
            and len(stubs) < MAX_STUBS
        )
        if not stubbable:
            raise
        log(f"module {missing!r} is not installed in this venv; retrying with an inert stub for it")
        env = dict(os.environ)
        env[STUB_ENV] = ",".join([*stubs, missing])
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
        raise  # unreachable


def build_parsers(stubs: list[str]):
    serve_mod = _import_serve_cli(stubs)
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # Same construction as vllm.entrypoints.cli.main.main()
    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve_parser = None
    for cmd in serve_mod.cmd_init():
        sp = cmd.subparser_init(subparsers)
        sp.set_defaults(dispatch_function=cmd.cmd)
        if cmd.name == "serve":
            serve_parser = sp
    if serve_parser is None:
        sys.exit("vllm.entrypoints.cli.serve.cmd_init() returned no 'serve' subcommand")
    return top, serve_parser


# ------------------------------------------------------------------ classification


def _is_config_class(obj: Any) -> bool:
    if not isinstance(obj, type):
        return False
    if dataclasses.is_dataclass(obj):
        return True
    return hasattr(obj, "model_fields") and hasattr(obj, "model_validate")


def _inner_callables(fn: Any) -> list[Any]:
    """Callables/types captured by a wrapper function (closure cells, then defaults)."""
    found: list[Any] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            val = cell.cell_contents
        except ValueError:
            continue
        if callable(val) or isinstance(val, type):
            found.append(val)
    for val in getattr(fn, "__defaults__", None) or ():
        if isinstance(val, type):
            found.append(val)
    return found


def describe_type(t: Any, depth: int = 0) -> tuple[str, dict[str, Any]]:
    """Map an argparse `type=` callable to (kind, extra info)."""
    if t is None or t is str:
        return "str", {}
    if t is int:
        return "int", {}
    if t is float:
        return "float", {}
    if t is bool:
        return "bool", {}
    if t is json.loads:
        return "json", {}
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return "str", {"enum": t}
    if _is_config_class(t):
        return "json", {"config_class": t}
    name = getattr(t, "__name__", type(t).__name__)
    if name == "human_readable_int":
        return "int", {"int_format": "human_readable"}
    if name == "human_readable_int_or_auto":
        return "int", {"int_format": "human_readable_or_auto"}
    if name == "union_dict_and_str":
        return "json", {"json_or_str": True}
    if name in ("loads",) and getattr(t, "__module__", "") == "json":
        return "json", {}
    if inspect.isfunction(t) and depth < 5:
        inner = _inner_callables(t)
        for cand in inner:
            kind, info = describe_type(cand, depth + 1)
            if not kind.startswith("other:"):
                if name == "_optional_type":  # vLLM's optional_type(): "" and "None" -> None
                    info = {**info, "accepts_none": True}
                return kind, info
        if not inner:
            # Self-contained str -> value functions: the inline lambdas in arg_utils.py
            # (`lambda s: s.lower().replace("-", "_")` for backend names, the comma-
            # splitting --device-ids parser) and e.g. 0.33's parse_reasoning_parser
            # ("none" -> ""). Probe them with sample strings.
            try:
                out, out2 = t("Ab-C"), t("1,x")
            except Exception:
                out = out2 = None
            if isinstance(out, str):
                if out == "Ab-C":
                    return "str", {"type_fn": name}
                return "str", {"type_fn": f"{name}: 'Ab-C' -> {out!r}"}
            if isinstance(out2, list) and len(out2) == 2:
                return "list", {"type_fn": name, "list_format": "comma-separated"}
    return f"other:{name}", {}


def _jsonable(val: Any) -> bool:
    if val is None or isinstance(val, (bool, int, str)):
        return not isinstance(val, enum.Enum)
    if isinstance(val, float):
        return math.isfinite(val)
    if isinstance(val, (list, tuple)):
        return all(_jsonable(v) for v in val)
    if isinstance(val, dict):
        return all(isinstance(k, str) and _jsonable(v) for k, v in val.items())
    return False


def _plain(val: Any) -> Any:
    if isinstance(val, (list, tuple)):
        return [_plain(v) for v in val]
    if isinstance(val, dict):
        return {k: _plain(val[k]) for k in sorted(val)}
    return val


def _choice_str(c: Any) -> str:
    if c is None:
        return "None"
    if isinstance(c, enum.Enum):
        return c.name
    return str(c)


def _flatten_hints(hint: Any) -> list[Any]:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _flatten_hints(typing.get_args(hint)[0])
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for a in typing.get_args(hint):
            out.extend(_flatten_hints(a))
        return out
    return [hint]


def _field_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for k, v in getattr(klass, "__annotations__", {}).items():
                if not isinstance(v, str):
                    hints[k] = v
        return hints


def config_fields(cls: type) -> list[str]:
    """Keys a JSON object for this config class may carry (init fields / model fields)."""
    if dataclasses.is_dataclass(cls):
        return sorted(f.name for f in dataclasses.fields(cls) if f.init)
    return sorted(getattr(cls, "model_fields", {}))


def config_choices(cls: type, top_level: set[type]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(json_choices, json_nested_keys) for fields typed as Literal / Enum / config class.

    Enum choices are member names (vLLM's validators parse strings by name, e.g.
    CompilationConfig.cudagraph_mode). Nested keys are listed only for sub-configs that
    users write as JSON sub-objects (e.g. compilation_config.pass_config), not for the
    engine's own top-level configs that some classes carry internally (e.g.
    SpeculativeConfig.target_model_config: ModelConfig)."""
    keys = set(config_fields(cls))
    hints = _field_hints(cls)
    choices: dict[str, list[str]] = {}
    nested: dict[str, list[str]] = {}
    for name in sorted(keys):
        if name not in hints:
            continue
        flat = _flatten_hints(hints[name])
        if str in flat:
            continue  # a free string is allowed too: the choices would not be enforced
        vals: list[str] = []
        for h in flat:
            if typing.get_origin(h) is typing.Literal:
                vals.extend(_choice_str(a) for a in typing.get_args(h))
            elif isinstance(h, type) and issubclass(h, enum.Enum):
                vals.extend(m.name for m in h)
            elif _is_config_class(h) and h is not cls and h not in top_level:
                nested[name] = config_fields(h)
        if vals:
            choices[name] = sorted(set(vals))
    return choices, nested


def vllm_config_field_classes() -> dict[str, type]:
    """VllmConfig field name -> config class (used for flags parsed with plain json.loads)."""
    try:
        from vllm.config import VllmConfig
    except Exception:  # pragma: no cover - very old layouts
        return {}
    out: dict[str, type] = {}
    hints = _field_hints(VllmConfig)
    for f in dataclasses.fields(VllmConfig):
        hint = hints.get(f.name, f.type)
        for h in _flatten_hints(hint):
            if _is_config_class(h):
                out[f.name] = h
                break
    return out


def _is_bool_optional(action: argparse.Action) -> bool:
    return isinstance(action, argparse.BooleanOptionalAction)


def catalog_action(
    action: argparse.Action,
    registered: list[str],
    parser: argparse.ArgumentParser,
    vllm_cfg_classes: dict[str, type],
) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    visible = set(action.option_strings)
    if hasattr(action, "negative_option_strings"):  # vLLM >= 0.33 EnableDisableAction
        negatives = set(action.negative_option_strings) & set(registered)
    elif _is_bool_optional(action):
        negatives = {o for o in registered if o.startswith("--no-")}
    else:
        negatives = set()
    # The canonical spelling (derived from the dest, as vLLM derives it from the field name)
    # first, then aliases sorted: e.g. ["--gpu-memory-utilization", "--device-memory-utilization"].
    canonical = "--" + action.dest.replace("_", "-")
    options = sorted(set(registered) - negatives, key=lambda o: (o != canonical, o))
    entry["options"] = options
    entry["negatives"] = sorted(negatives)
    info: dict[str, Any] = {}
    kind: str
    if _is_bool_optional(action):
        kind = "bool"
    elif isinstance(action, argparse._StoreTrueAction):
        kind, info = "bool", {"store": True}
    elif isinstance(action, argparse._StoreFalseAction):
        kind, info = "bool", {"store": False}
    elif isinstance(action, argparse._StoreConstAction):
        kind, info = "other:store_const", {}
    else:
        kind, info = describe_type(action.type)
        if kind == "list":
            pass  # the type function itself returns a list (comma-separated value)
        elif isinstance(action, argparse._AppendAction):
            info = {**info, "action": "append", "item_kind": kind}
            kind = "list"
        elif action.nargs in ("+", "*") or isinstance(action.nargs, int):
            info = {**info, "item_kind": kind}
            kind = "list"
        elif type(action) not in (argparse._StoreAction,):
            info = {**info, "action": type(action).__name__}
    entry["kind"] = kind
    if "store" in info:
        entry["store"] = info.pop("store")
    choices = action.choices
    enum_cls = info.pop("enum", None)
    if choices is None and enum_cls is not None:
        choices = list(enum_cls)
    if choices is not None:
        seq = list(choices)
        vals = [_choice_str(c) for c in seq]
        if not isinstance(choices, (list, tuple)):
            vals = sorted(vals)
        entry["choices"] = vals
    else:
        entry["choices"] = None
    # store_true/false and BooleanOptionalAction take no value (argparse nargs=0)
    entry["nargs"] = None if kind == "bool" and action.nargs == 0 else action.nargs
    if isinstance(action.metavar, (list, tuple)) and entry["choices"] is None:
        # vLLM's literal_to_kwargs(): a `Literal[...] | str` field lists its Literal values as
        # metavar instead of choices, i.e. argparse accepts any string (e.g. 0.33's
        # --kv-cache-dtype, checked later by the engine). Recorded as known, not enforced.
        entry["known_values"] = [_choice_str(m) for m in action.metavar]
    if _jsonable(action.default):
        entry["default"] = _plain(action.default)
    if (
        action.const is not None
        and _jsonable(action.const)
        and not isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
    ):
        entry["const"] = _plain(action.const)
    hidden = sorted(set(registered) - visible)
    if hidden:
        entry["hidden"] = hidden
    if action.help == argparse.SUPPRESS:
        entry["help_suppressed"] = True
    deprecated = getattr(action, "deprecated", False) or action in getattr(parser, "_deprecated", ())
    if deprecated:
        entry["deprecated"] = True
    if action.required:
        entry["required"] = True
    cfg = info.pop("config_class", None)
    if kind == "json" and cfg is None:
        cfg = vllm_cfg_classes.get(action.dest)
    if kind == "json" and cfg is not None:
        entry["json_class"] = cfg.__name__
        entry["json_keys"] = config_fields(cfg)
        jchoices, jnested = config_choices(cfg, set(vllm_cfg_classes.values()))
        if jchoices:
            entry["json_choices"] = jchoices
        if jnested:
            entry["json_nested_keys"] = jnested
    for k in sorted(info):
        entry[k] = info[k]
    return entry


def build_catalog(serve_parser: argparse.ArgumentParser) -> tuple[dict, list]:
    by_action: dict[int, list[str]] = {}
    for opt, act in serve_parser._option_string_actions.items():
        by_action.setdefault(id(act), []).append(opt)
    cfg_classes = vllm_config_field_classes()
    flags: dict[str, dict[str, Any]] = {}
    positionals: list[dict[str, Any]] = []
    for action in serve_parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        if not action.option_strings:
            kind, _ = describe_type(action.type)
            positionals.append({"dest": action.dest, "kind": kind, "nargs": action.nargs})
            continue
        entry = catalog_action(action, by_action.get(id(action), []), serve_parser, cfg_classes)
        if action.dest in flags:
            prev = flags[action.dest]
            # Several actions share one dest (aliases): merge their option strings.
            for key in ("options", "negatives"):
                prev[key] = sorted(set(prev[key]) | set(entry[key]))
            if prev["kind"] != entry["kind"]:
                prev.setdefault("alias_kinds", sorted({prev["kind"], entry["kind"]}))
            continue
        flags[action.dest] = entry
    return flags, positionals


def probe_cli_syntax(top: argparse.ArgumentParser, serve_parser: argparse.ArgumentParser) -> dict:
    """What FlexibleArgumentParser.parse_args() rewrites before argparse sees the args."""
    defaults = vars(top.parse_args(["serve", "m"]))

    def parse(extra: list[str]) -> dict | None:
        try:
            ns = top.parse_args(["serve", "m", *extra])
        except (SystemExit, Exception):
            return None
        return {k: v for k, v in vars(ns).items() if k not in defaults or defaults[k] != v}

    out: dict[str, Any] = {"allow_abbrev": bool(serve_parser.allow_abbrev)}
    changed = parse(["--max_num_seqs", "3"])
    out["underscore_options"] = bool(changed) and changed.get("max_num_seqs") == 3
    changed = parse(["-O3"])
    out["dash_O"] = sorted(changed) if changed else None
    changed = parse(["--compilation-config.mode", "3"])
    out["dotted_json_keys"] = bool(changed) and "compilation_config" in changed
    return out


def self_check(top: argparse.ArgumentParser, flags: dict) -> list[str]:
    """Parse every boolean spelling through vLLM's own top-level parser (with its
    FlexibleArgumentParser.parse_args preprocessing) and confirm the value the catalog
    claims: options -> True (or the `store` value), negatives -> False."""
    problems: list[str] = []
    for dest, entry in sorted(flags.items()):
        if entry["kind"] != "bool":
            continue
        expect = [(o, entry.get("store", True)) for o in entry["options"]]
        expect += [(o, False) for o in entry["negatives"]]
        for opt, want in expect:
            try:
                got = getattr(top.parse_args(["serve", "m", opt]), dest)
            except BaseException as e:  # argparse exits on errors
                problems.append(f"{opt}: parse failed ({type(e).__name__})")
                continue
            if got is not want:
                problems.append(f"{opt}: {dest}={got!r}, catalog says {want!r}")
    return problems


# ---------------------------------------------------------------------- rendering


def _pack(items: list[str], indent: int, width: int) -> str:
    """Several short scalar literals per line (for long lists such as json_keys)."""
    lines, cur = [], ""
    for it in items:
        piece = it + ","
        if cur and indent + len(cur) + 1 + len(piece) > width:
            lines.append(cur)
            cur = piece
        else:
            cur = f"{cur} {piece}" if cur else piece
    if cur:
        lines.append(cur)
    return "\n".join(" " * indent + line for line in lines)


def _lit(val: Any) -> str:
    if val is None or isinstance(val, bool):
        return repr(val)
    if isinstance(val, (int, float)):
        return repr(val)
    if isinstance(val, str):
        return json.dumps(val)
    if isinstance(val, list):
        return "[" + ", ".join(_lit(v) for v in val) + "]"
    if isinstance(val, dict):
        return "{" + ", ".join(f"{_lit(k)}: {_lit(v)}" for k, v in val.items()) + "}"
    raise TypeError(f"not a plain literal: {val!r}")


def _fmt(val: Any, indent: int, width: int = 110) -> str:
    """Literal for `val` whose first line starts at column `indent`; breaks long containers."""
    inline = _lit(val)
    if indent + len(inline) <= width or not isinstance(val, (list, dict)) or not val:
        return inline
    pad = " " * (indent + 4)
    if isinstance(val, list) and not any(isinstance(v, (list, dict)) for v in val):
        return "[\n" + _pack([_lit(v) for v in val], indent + 4, width) + "\n" + " " * indent + "]"
    if isinstance(val, list):
        items = [pad + _fmt(v, indent + 4, width) + "," for v in val]
    else:
        items = [pad + _lit(k) + ": " + _fmt(v, indent + 4, width) + "," for k, v in val.items()]
    return (
        ("[" if isinstance(val, list) else "{")
        + "\n"
        + "\n".join(items)
        + "\n"
        + " " * indent
        + ("]" if isinstance(val, list) else "}")
    )


CATALOG_FORMAT = """\
CLI_SYNTAX: rewrites FlexibleArgumentParser.parse_args applies before argparse (probed):
  underscore_options (--max_num_seqs == --max-num-seqs), dash_O (dests that -O<n> sets),
  dotted_json_keys (--compilation-config.mode 3); allow_abbrev means argparse also accepts
  any unambiguous prefix of a long option (--enable-prefix == --enable-prefix-caching).
FLAGS: argparse dest -> entry with
  options       option strings that set the value (for booleans: set it True / the store value);
                the canonical one (from the dest) first when it exists, then aliases sorted
  negatives     option strings that set a boolean False (--no-X; from 0.33 also --disable-X/--enable-X)
  kind          bool | int | float | str | json | list | other:<type function name>
  store         only for store_true/store_false flags: the value the flag stores
  choices       values argparse enforces (None/"None" included when the type maps "None" to None)
  nargs         argparse nargs (None = one value; bool flags take none)
  default       only when it is a plain literal
  optional keys: known_values (Literal|str fields: listed, not enforced), hidden (accepted but
  not shown in --help), accepts_none ("" and "None" parse to None), int_format
  (human_readable: 1k/1K/..., human_readable_or_auto: also -1/auto), json_or_str (JSON
  object or plain string), item_kind/action (list flags), type_fn (custom type function),
  json_class/json_keys/json_choices/json_nested_keys (JSON config flags: the config class,
  its accepted top-level keys, Literal/Enum values per key (Enum = member names), and the keys
  of nested sub-config objects).
"""


def render(version: str, flags: dict, positionals: list, syntax: dict, vllm_version: str) -> str:
    # Import stubs (see the module docstring) are only logged, not written: they do not
    # change the parser, and the catalog must not depend on what the generating venv has.
    header = f"""`vllm serve` flag catalog for vLLM {version}. Generated by tools/gen_flag_catalog.py \
from the engine's own argument parser; do not edit.

vllm.__version__ at generation: {vllm_version}.
Entry format: CATALOG_FORMAT in tools/gen_flag_catalog.py.
"""
    lines = [
        '"""' + header + '"""',
        "",
        f"ENGINE_VERSION = {_lit(version)}",
        "",
        f"CLI_SYNTAX = {_fmt(syntax, 0)}",
        "",
        f"POSITIONALS = {_fmt(positionals, 0)}",
        "",
        "FLAGS = {",
    ]
    for dest in sorted(flags):
        entry = flags[dest]
        # JSON config flags: one key per line; everything else: one flag per line.
        body = _fmt(entry, 4) if any(k.startswith("json_") for k in entry) else _lit(entry)
        lines.append(f"    {_lit(dest)}: {body},")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", required=True, help="vLLM version the catalog is for, e.g. 0.33.0")
    ap.add_argument("--vllm-src", help="directory containing an unpacked wheel's vllm/ package")
    ap.add_argument("--out", required=True, help="output .py file")
    ap.add_argument(
        "--allow-version-mismatch",
        action="store_true",
        help="do not fail when vllm.__version__ does not start with --version",
    )
    args = ap.parse_args()

    stubs = _prepare_environment(args.vllm_src)
    top, serve_parser = build_parsers(stubs)
    import vllm

    vllm_version = str(getattr(vllm, "__version__", "?"))
    origin = Path(vllm.__file__).resolve().parent
    log(f"using vllm {vllm_version} from {origin}; stubs: {stubs or 'none'}")
    if not vllm_version.startswith(args.version) and not args.allow_version_mismatch:
        log(f"ERROR: imported vllm is {vllm_version}, not {args.version}")
        return 2
    flags, positionals = build_catalog(serve_parser)
    syntax = probe_cli_syntax(top, serve_parser)

    problems = self_check(top, flags)
    if problems:
        log("ERROR: catalog disagrees with the parser:\n  " + "\n  ".join(problems))
        return 3
    log(
        f"self-check: every boolean spelling parses to the catalogued value "
        f"({sum(len(e['options']) + len(e['negatives']) for e in flags.values() if e['kind'] == 'bool')} spellings)"
    )
    missing = [f for f in REQUIRED_FLAGS if f not in flags]
    if missing:
        log(f"ERROR: flags the project needs are missing from {args.version}: {', '.join(missing)}")
        return 4
    for name in OPTIONAL_CHECKED_FLAGS:
        if name not in flags:
            log(f"note: {name} does not exist in {args.version}")
    others = sorted(f"{d}={e['kind']}" for d, e in flags.items() if e["kind"].startswith("other:"))
    if others:
        log(f"unclassified flags: {', '.join(others)}")
    text = render(args.version, flags, positionals, syntax, vllm_version)
    compile(text, args.out, "exec")  # must be a valid module
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    log(f"wrote {args.out}: {len(flags)} flags, {len(positionals)} positionals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
