"""What roles/hf_model refuses before any node changes: each node's model inputs, and nodes given different models.
Pure: no Ansible API; roles/hf_model/library/hf_model_inputs.py calls these.

A request is one node's inputs: repo, revision, cache_dir, image, download_host, peer_address, download_attempts.
"""

import re

from ansible.module_utils.hash_patterns import DIGEST

REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
# A digest-pinned image, or one engine_image built (named by the hash of its inputs).
IMAGE = re.compile(rf"^([^@\s]+@{DIGEST}|spark-serve/[a-z0-9_-]+:[0-9a-f]{{16}})$")
# What every node must share: they serve the same snapshot.
SHARED = ("repo", "revision", "cache_dir", "image", "download_host")


def as_int(value):
    """The value as an integer, 0 when it is none."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def input_problems(request, play_hosts):
    r = {key: str(value) for key, value in request.items()}
    problems = [] if REPO.match(r["repo"]) else [f"hf_model_repo '{r['repo']}' is not org/name"]
    if not COMMIT.match(r["revision"]):
        problems.append(
            f"hf_model_revision '{r['revision']}' is not a commit: pin a commit sha or a prefix of at least 7 hex "
            "digits (branches and tags move)"
        )
    if not r["cache_dir"].startswith("/"):
        problems.append(f"hf_model_cache_dir {r['cache_dir']} is not an absolute path")
    if not IMAGE.match(r["image"]):
        problems.append(
            f"hf_model_image '{r['image']}' is neither <repository>@sha256:<64 hex> nor an image engine_image built "
            "(spark-serve/<name>:<inputs hash>): the download runs in the pinned engine image"
        )
    if r["download_host"] not in play_hosts:
        problems.append(f"hf_model_download_host {r['download_host']} is not in this play")
    if not r["peer_address"]:
        problems.append("hf_model_peer_address is empty (the fast-link address, roce_network_address)")
    if as_int(request["download_attempts"]) < 1:
        problems.append("hf_model_download_attempts must be at least 1")
    return problems


def shared_key(request):
    return " ".join(str(request[key]) for key in SHARED)


def request_problems(hosts, requests, play_hosts):
    """Every node's input problems, and every node whose model differs from the first node's, in play order."""
    first, problems = hosts[0], []
    for host in hosts:
        problems += [f"{host}: {problem}" for problem in input_problems(requests[host], play_hosts)]
        key, first_key = shared_key(requests[host]), shared_key(requests[first])
        if key != first_key:
            problems.append(
                f"{host}: model, revision, cache, image or download host ({key}) differ from {first} ({first_key}): "
                "every node serves the same snapshot"
            )
    return problems
