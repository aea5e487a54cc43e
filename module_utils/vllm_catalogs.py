"""Which generated flag catalog (module_utils/vllm_flags_*.py) serves which engine version."""

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
