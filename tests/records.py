"""A deployment record as library/vllm_record writes it, before its id, time and signature: the fields the record
modules' unit tests start from (valid hashes, so that a head copy of it would pass the import's checks)."""

DEPLOY_RECORD = {
    "kind": "deploy",
    "status": "passed",
    "inventory": "spark-pair",
    "profile_name": "pair",
    "engine_version": "0.32.0",
    "image": {"ref": "r/vllm@sha256:" + "a" * 64, "digest": "sha256:" + "a" * 64},
    "model": {"id": "org/m", "revision": "fc694b54"},
}
