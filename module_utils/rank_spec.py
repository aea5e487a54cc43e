"""A rank's complete container spec, its bind mounts, its configuration hash and the rank file, from what
roles/vllm_service/tasks/render.yml knows of the rank (vllm_args' result, the container options, the caches, the
overlays, the tuned MoE tables).

The configuration hash is the running container's label org.spark-serve.config-hash: whether a deploy restarts a
rank, and what a record's hash is compared with. It is the SHA-256 of the spec as JSON with sorted keys, the way
Ansible's `to_json(sort_keys=true) | hash('sha256')` wrote it before this module existed: another byte would restart
every rank on upgrade.

Pure Python (no Ansible) so plain pytest can test it; roles/vllm_service/library/vllm_rank_spec.py reads the key
file and returns only the hash.
"""

import hashlib
import json
import posixpath
from dataclasses import dataclass

# Where huggingface_hub looks when the environment names no HF_HOME.
HF_HOME_DEFAULT = "/root/.cache/huggingface"


@dataclass(frozen=True)
class RankInputs:
    """One rank as render.yml knows it; the field names are vllm_rank_spec's options."""

    host: str
    rank: int
    image: str
    argv: list
    env: dict
    effective_block: int | None
    scheduler_block: int | None
    container_defaults: dict
    container: dict  # the profile's container section
    container_overrides: dict
    restart: str
    engine_key_file: str  # '' = the engine checks no key
    hf_cache_dir: str
    engine_cache_dir: str
    overlays: list  # vllm_overlays' overlays: name, dest, sha256, src
    tuned_files: list  # ansible.builtin.find's files: path, checksum
    tuned_folder: str  # VLLM_TUNED_CONFIG_FOLDER in the container
    service_dir: str

    @property
    def api_key(self):
        """Whether this rank reads the engine's key: only the head's engine checks it (its secrets.env)."""
        return self.rank == 0 and len(self.engine_key_file) > 0


def key_digest(text):
    """SHA-256 of a key file's text as Ansible's file lookup reads it (trailing whitespace stripped)."""
    return hashlib.sha256(text.rstrip().encode("utf-8", "surrogateescape")).hexdigest()


def tuned_tables(found):
    """The tables `find` found as name, controller path and SHA-1, ordered by name ignoring case (Jinja's sort)."""
    tables = [{"name": posixpath.basename(f["path"]), "path": f["path"], "checksum": f["checksum"]} for f in found]
    return sorted(tables, key=lambda table: table["name"].lower())


def container_options(inputs):
    """Defaults, then the profile's container section, then the inventory's, each key replaced whole (combine)."""
    return {**inputs.container_defaults, **inputs.container, **inputs.container_overrides, "restart": inputs.restart}


def rank_spec(inputs, tables):
    """What the container runs; the tuned tables' checksums are in it, so a changed table restarts the engine."""
    spec = {
        "image": inputs.image,
        "argv": inputs.argv,
        "env": inputs.env,
        "container": container_options(inputs),
        "api_key": inputs.api_key,  # whether, never the key; its digest goes into the hash alone
        "hf_cache_dir": inputs.hf_cache_dir,
        "engine_cache_dir": inputs.engine_cache_dir,
        "overlays": inputs.overlays,
    }
    if tables:
        spec["tuned_tables"] = [{"name": table["name"], "checksum": table["checksum"]} for table in tables]
    return spec


def mounts(spec, inputs):
    """The service's bind mounts: compose renders them, vllm_container_paths checks the same list."""
    env = spec["env"]
    found = [
        {"src": spec["hf_cache_dir"], "dest": env.get("HF_HOME", HF_HOME_DEFAULT), "ro": True},
        {"src": spec["engine_cache_dir"], "dest": env["VLLM_CACHE_ROOT"], "ro": False},
    ]
    found += [
        {"src": f"{inputs.service_dir}/overlays/{overlay['name']}", "dest": overlay["dest"], "ro": True}
        for overlay in spec["overlays"]
    ]
    if "tuned_tables" in spec:
        found.append({"src": f"{inputs.service_dir}/tuned_configs", "dest": inputs.tuned_folder, "ro": True})
    return found


def config_hash(spec, digest):
    """SHA-256 of the spec as sorted JSON (Ansible's to_json: json.dumps, default separators, ASCII): the restart
    policy left out (a new policy is applied in place), the key's digest in place of api_key (a new key restarts
    the ranks). Sorted keys: a restored record and the profile it came from hash the same."""
    hashed = dict(
        spec,
        container={key: value for key, value in spec["container"].items() if key != "restart"},
        api_key=digest if spec["api_key"] else "",
    )
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()


def rank_file(spec, rank_mounts, spec_hash, inputs):
    """What playbooks/validate.yml writes to rank<N>.spec.json: whether the head reads secrets.env, never the key."""
    described = {key: value for key, value in spec.items() if key != "api_key"}
    return dict(
        described,
        host=inputs.host,
        rank=inputs.rank,
        mounts=rank_mounts,
        env_file=["secrets.env"] if spec["api_key"] else [],
        effective_block=inputs.effective_block,
        scheduler_block=inputs.scheduler_block,
        config_hash=spec_hash,
    )


def render(inputs, digest):
    """spec, mounts, config_hash, rank_file and tuned_tables of one rank; `digest` is key_digest() of the engine's
    key when inputs.api_key, else ''."""
    tables = tuned_tables(inputs.tuned_files)
    spec = rank_spec(inputs, tables)
    rank_mounts = mounts(spec, inputs)
    spec_hash = config_hash(spec, digest)
    return {
        "spec": spec,
        "mounts": rank_mounts,
        "config_hash": spec_hash,
        "rank_file": rank_file(spec, rank_mounts, spec_hash, inputs),
        "tuned_tables": tables,
    }
