"""A rank's environment: the profile's variables checked (no secret, no fabric variable, no unsafe switch unless
named), the fabric's from roce_network, usage stats off, and torch's allocator fraction following
gpu_memory_utilization (the engine's own default, from the catalog, when the profile leaves it out).

Pure Python (stdlib only).
"""

import math

from ansible.module_utils.engine_flags import format_scalar
from ansible.module_utils.engine_refusals import RuleChecks
from ansible.module_utils.input_rules import allocator_problems, has_newline
from ansible.module_utils.redaction import REDACTED, is_secret_name
from ansible.module_utils.vllm_catalogs import option_value

ALLOCATOR_ENV = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
# The fabric's environment (roles/roce_network/tasks/verify.yml publishes it per node): never a profile's.
FABRIC_ENV = frozenset(
    (
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "VLLM_HOST_IP",
    )
)
API_KEY_FILE_ENV = "SPARK_SERVE_API_KEY_FILE"
# vLLM switches (vllm/envs.py) that open the engine to whoever reaches its port: refused while on unless the profile
# names them in allow_unsafe_env.
UNSAFE_ENV = {
    "VLLM_SERVER_DEV_MODE": "serves the developer endpoints (/reset_prefix_cache, /sleep, /collective_rpc, ...) that "
    "change or stop the engine",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "lets a client load LoRA adapters from paths or repositories it names",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "lets the engine unpickle its messages (running code sent to its sockets)",
}
OFF_WORDS = ("", "0", "false", "no", "off")
# vLLM reports usage to its maintainers unless told not to (vllm/envs.py): off in every profile unless it says so.
NO_USAGE_STATS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


class EnvRules(RuleChecks):
    """The rendered environment of one rank."""

    def check_env(self, env, values, platform, catalog):
        rendered = {}
        for key, val in env.items():
            if is_secret_name(key):
                self.fail(
                    f"env.{key}",
                    REDACTED,
                    "secret-in-env",
                    "a credential-like name (KEY, TOKEN, SECRET, PASSWORD) never goes into the rendered "
                    "environment, compose file or record; use api_key_file",
                )
            elif key in FABRIC_ENV:
                self.fail(
                    f"env.{key}",
                    val,
                    "fabric-env",
                    "roce_network sets it per node from the inventory (roce_network_interface, roce_network_nccl_ib_hca"
                    " and _twins for the rails), after checking every port; a profile value would be silently replaced",
                )
            elif isinstance(val, (dict, list)) or val is None:
                self.fail(f"env.{key}", val, "env-string", "environment values must be scalars")
            elif has_newline(val):
                self.fail(f"env.{key}", val, "no-newline", "must not contain a line break (it would inject lines)")
            else:
                rendered[key] = str(val).lower() if isinstance(val, bool) else str(val)
                self.check_unsafe_env(key, rendered[key])
        if self.p.get("api_key_file"):
            rendered[API_KEY_FILE_ENV] = str(self.p["api_key_file"])
        for name, value in NO_USAGE_STATS.items():
            rendered.setdefault(name, value)
        present = [name for name in ALLOCATOR_ENV if name in rendered]
        confs = {name: parse_allocator_conf(rendered[name]) for name in present}
        for name, pairs in confs.items():
            for rule, problem in allocator_problems(pairs):
                self.fail(f"env.{name}", rendered[name], rule, problem)
        if len(confs) == 2 and confs[ALLOCATOR_ENV[0]] != confs[ALLOCATOR_ENV[1]]:
            self.fail(
                f"env.{ALLOCATOR_ENV[1]}",
                rendered[ALLOCATOR_ENV[1]],
                "allocator-disagree",
                f"differs from {ALLOCATOR_ENV[0]}={rendered[ALLOCATOR_ENV[0]]!r}; torch reads only one of "
                "them, so one setting would be silently ignored: set one",
            )
        if platform != "cpu":
            self.render_allocator_fraction(rendered, confs, values, catalog)
        return rendered

    def check_unsafe_env(self, key, value):
        """A switch of UNSAFE_ENV turned on needs the profile's allow_unsafe_env to name it."""
        allowed = self.p.get("allow_unsafe_env") or []
        if key in UNSAFE_ENV and value.strip().lower() not in OFF_WORDS and key not in allowed:
            self.fail(
                f"env.{key}",
                value,
                "unsafe-env",
                f"{UNSAFE_ENV[key]}; acknowledge it by name with allow_unsafe_env: [{key}] in the profile",
            )

    def check_fabric_env(self, fabric_env):
        """The fabric's variables as roce_network published them (it checked every port): only FABRIC_ENV keys."""
        rendered = {}
        for key, val in fabric_env.items():
            if key not in FABRIC_ENV:
                self.fail(f"fabric_env.{key}", val, "fabric-env-key", f"not a fabric variable ({sorted(FABRIC_ENV)})")
            elif has_newline(val):
                self.fail(f"fabric_env.{key}", val, "no-newline", "must not contain a line break")
            else:
                rendered[key] = str(val)
        return rendered

    def render_allocator_fraction(self, rendered, confs, values, catalog):
        """per_process_memory_fraction follows gpu_memory_utilization: rendered when absent, checked when set."""
        util = option_value(catalog, values, "gpu_memory_utilization")
        for name, pairs in confs.items():
            fraction = pairs.get("per_process_memory_fraction")
            if fraction is not None and not same_number(fraction, util):
                self.fail(
                    f"env.{name}",
                    rendered[name],
                    "allocator-fraction",
                    f"per_process_memory_fraction {fraction} must equal gpu_memory_utilization {util}; "
                    "leave it out and it is rendered from gpu_memory_utilization",
                )
            elif fraction is None:
                pairs["per_process_memory_fraction"] = format_scalar(util)
                rendered[name] = format_allocator_conf(pairs)
        if not confs:
            rendered["PYTORCH_ALLOC_CONF"] = f"per_process_memory_fraction:{format_scalar(util)}"


def parse_allocator_conf(text):
    pairs = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, _, val = part.partition(":")
        pairs[key.strip()] = val.strip()
    return pairs


def format_allocator_conf(pairs):
    return ",".join(f"{k}:{v}" for k, v in pairs.items())


def same_number(text, number):
    try:
        return math.isclose(float(text), float(number), abs_tol=1e-9)
    except (TypeError, ValueError):
        return False
