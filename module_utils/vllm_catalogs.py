"""Which generated flag catalog (module_utils/vllm_flags_*.py) serves which engine version, and the engine's own
defaults it holds (what a profile that leaves an option out runs with)."""

import re

from ansible.module_utils import vllm_flags_0_30_0, vllm_flags_0_32_0, vllm_flags_0_33_0

DEFAULT_ENGINE_VERSION = "0.33.0"

# minor series -> catalog; a dev or rc build of a series uses its release's parser
CATALOGS = {
    "0.30": vllm_flags_0_30_0,
    "0.32": vllm_flags_0_32_0,
    "0.33": vllm_flags_0_33_0,
}


def series(version):
    parts = str(version).split(".")
    return ".".join(parts[:2])


def catalog_for(version):
    module = CATALOGS.get(series(version))
    if module is None:
        raise ValueError(
            f"no flag catalog for vLLM {version}; supported series: {', '.join(sorted(CATALOGS))} "
            "(generate one with tools/gen_flag_catalogs.sh)"
        )
    return {"ENGINE_VERSION": module.ENGINE_VERSION, "FLAGS": module.FLAGS, "CLI_SYNTAX": module.CLI_SYNTAX}


def nearest_catalog(version):
    """The catalog that renders a version with none of its own (a nightly, a newer release): the newest series not
    newer than it, else the oldest. Its flags only render; the image's own vLLM parser judges them before any rank
    starts (module_utils/image_parser.py)."""
    major_minor = re.match(r"(\d+)\.(\d+)", str(version))
    wanted = tuple(map(int, major_minor.groups())) if major_minor else (0, 0)
    known = sorted(tuple(map(int, name.split("."))) for name in CATALOGS)
    chosen = max((s for s in known if s <= wanted), default=known[0])
    return catalog_for(".".join(map(str, chosen)))


def option_value(catalog, values, dest):
    """What the engine runs with for one option: the profile's value, else the default its own parser declares (the
    catalog of the profile's engine_version), never a figure copied into this project."""
    return values[dest] if dest in values else catalog["FLAGS"][dest]["default"]
