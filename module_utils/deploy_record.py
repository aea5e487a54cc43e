"""Deployment records: what ran, how it started and whether it passed the gate, so the last good combination
can be restored (seed 000's rule). One JSON file (machine-readable) and one Markdown file (for people) per deploy,
never deleted by the project.

Pure Python (no Ansible) so plain pytest can test it; library/vllm_record.py and library/vllm_record_info.py
read and write the files.
"""

import hashlib
import json
import os
import re
import tempfile


def record_id(created_utc, inventory, kind):
    """File-name-safe id that sorts by time: 20261201T071500.123456Z-testbed-pair-deploy (microseconds, and
    write_once refuses an existing name, so two controllers cannot write one id)."""
    return f"{created_utc}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', inventory)}-{kind}"


def write_once(path, text):
    """Write `text` to `path` whole or not at all: a temporary file beside it, fsynced, then linked to its name
    (FileExistsError when the name exists: a record is never overwritten), then the directory fsynced. A crash or
    a full disk leaves at most a temporary file, never a truncated record."""
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".writing-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.link(temporary, path)
    finally:
        os.unlink(temporary)
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def overlay_problems(record):
    """Why a record's overlays cannot be trusted as file names: each `sha256` names a stored text (a path), so it
    must be 64 lowercase hex and nothing else (a `../` in a record copied from a head would name any file)."""
    overlays = record.get("overlays") or []
    if not isinstance(overlays, list):
        return ["overlays is not a list"]
    return [
        f"overlays[{index}].sha256 {str(overlay.get('sha256'))[:80]!r} is not 64 lowercase hex"
        for index, overlay in enumerate(overlays)
        if not isinstance(overlay, dict) or not SHA256_HEX.match(str(overlay.get("sha256", "")))
    ]


def read_records(paths):
    """(records, unreadable): every record that parses, and {path, error} for each one that does not (a truncated
    file from a crash elsewhere, or an overlay hash that is no hash, is named and skipped, never blocking a deploy
    or a rollback)."""
    records, unreadable = [], []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as source:
                record = json.load(source)
            if not isinstance(record, dict) or not record.get("id"):
                raise ValueError("not a deployment record (no id)")
            problems = overlay_problems(record)
            if problems:
                raise ValueError("; ".join(problems))
            records.append(record)
        except (OSError, ValueError) as err:
            unreadable.append({"path": path, "error": str(err)})
    return records, unreadable


def stored_text_problem(path, sha256):
    """None when the overlay text stored at `path` hashes to `sha256` (what a rollback would mount), else why not."""
    try:
        with open(path, "rb") as stored:
            actual = hashlib.sha256(stored.read()).hexdigest()
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    return None if actual == sha256 else f"{path}: its text hashes to {actual}, the record says {sha256}"


def last_passed(records, inventory=None):
    """The newest record that passed the gate (for `inventory` when given)."""
    candidates = [
        r for r in records if r.get("status") == "passed" and (inventory is None or r.get("inventory") == inventory)
    ]
    return max(candidates, key=lambda r: r["id"], default=None)


def deployment_of(record):
    """The deployment a record runs: a rollback runs the one it restores (always an original deployment: restoring
    a rollback record names the deployment that one restored), so restoring it again changes nothing."""
    return record.get("restores") or record.get("id")


def rollback_target(records, inventory, wanted="", running=""):
    """(record, problem): the passed record of `inventory` with id `wanted`, or without it the newest passed one
    that runs another deployment than the `running` record (a deploy that passed the gate but behaves badly is
    left for the one before it)."""
    passed = [r for r in records if r.get("status") == "passed" and r.get("inventory") == inventory]
    if wanted:
        found = [r for r in records if r.get("id") == wanted]
        if not found:
            known = ", ".join(r["id"] for r in sorted(passed, key=lambda r: r["id"])[-5:]) or "none"
            return None, f"spark_serve_rollback_to={wanted}: no such record; the newest passed ones: {known}"
        record = found[0]
        if record.get("inventory") != inventory:
            return None, (
                f"spark_serve_rollback_to={wanted}: a record of inventory {record.get('inventory')}, not {inventory}"
            )
        if record.get("status") != "passed":
            return None, (
                f"spark_serve_rollback_to={wanted}: its status is {record.get('status')}; "
                "only a deployment that passed the gate is restored"
            )
        return record, ""
    by_id = {r["id"]: r for r in records}
    now = deployment_of(by_id[running]) if running in by_id else running
    others = [r for r in passed if deployment_of(r) != now]
    if not others:
        return None, f"no deployment of inventory {inventory} other than the running one ({now or 'none'}) passed"
    return max(others, key=lambda r: r["id"]), ""


def last_timed_start(records, inventory=None, image_ref=None):
    """The newest passing record whose start reached ready (its timeline ends with ready), of `image_ref` (the
    image every rank ran: name@digest, or a built image's name) when given: the staged start's stage budgets come
    from it, and another image may spend longer in a stage (a cold compile cache). A rerun that restarted nothing
    has no timeline and is skipped."""
    candidates = [
        r
        for r in records
        if r.get("status") == "passed"
        and (inventory is None or r.get("inventory") == inventory)
        and (image_ref is None or (r.get("image") or {}).get("ref") == image_ref)
        and any(event.get("event", "").startswith("head /health 200") for event in r.get("timings") or [])
    ]
    return max(candidates, key=lambda r: r["id"], default=None)


def readback_line(figures):
    """The engine's own logged figures beside the prediction (None where the log held none)."""
    if not figures:
        return "- engine read-back: none (no start, or the gate did not run)"
    return (
        f"- engine read-back: attention block {figures.get('attention_block')} tokens, KV cache "
        f"{figures.get('kv_cache_tokens')} tokens (max concurrency {figures.get('max_concurrency')}x at "
        f"{figures.get('concurrency_at_tokens')} tokens), MoE config {figures.get('moe_config')}"
        + (" (default-MoE warning)" if figures.get("moe_default_warning") else "")
        + f", attention backend {figures.get('attention_backend')}"
    )


def markdown(record):
    """The human-readable view of a record."""
    acceptance = record.get("acceptance") or {}
    lines = [
        f"# Deployment {record['id']}",
        "",
        f"- status: **{record['status']}**" + (f" ({record['reason']})" if record.get("reason") else ""),
        f"- kind: {record['kind']}"
        + (f", restoring {record['restores']}" if record.get("restores") else "")
        + (
            ", gated without a restart (an earlier run started it and ended before the gate)"
            if record.get("restarted") is False
            else ""
        ),
        f"- inventory: {record['inventory']}, profile: {record['profile_name']}",
        f"- engine: vLLM {record['engine_version']}, image {record['image']['ref']}"
        + (f" (id {record['image']['id']})" if record["image"].get("id") else ""),
        f"- model: {record['model']['id']} @ {record['model']['revision']}"
        + (
            f", snapshot file list sha256 {record['model']['files_sha256']}"
            if record["model"].get("files_sha256")
            else ""
        ),
        f"- predicted effective block: {record.get('effective_block')} tokens",
        readback_line(record.get("acceptance", {}).get("readback")),
        f"- versions: {', '.join(f'{k} {v}' for k, v in sorted(record.get('versions', {}).items()))}",
        "",
        "## Overlays",
        "",
    ]
    lines += [f"- {o['src']} -> {o['dest']} (sha256 {o['sha256']})" for o in record.get("overlays", [])] or ["- none"]
    lines += ["", "## Ranks", ""]
    for rank in record.get("ranks", []):
        lines += [
            f"- rank {rank['rank']} on {rank['host']}: `{' '.join(rank['argv'])}`",
            f"  env: `{json.dumps(rank.get('env', {}), sort_keys=True)}`",
        ]
    lines += ["", "## Timings (seconds after the start began)", ""]
    lines += [f"- {t['seconds']}: {t['event']}" for t in record.get("timings", [])] or ["- none (no start)"]
    lines += ["", "## Acceptance", ""]
    if not acceptance:
        lines.append("- not run")
    else:
        lines.append(f"- passed: {acceptance.get('passed')}")
        lines += [f"- FAILED: {failure}" for failure in acceptance.get("failures", [])]
        summary = acceptance.get("summary") or {}
        lines += [f"- {key}: {summary[key]}" for key in sorted(summary) if not isinstance(summary[key], (dict, list))]
    return "\n".join(lines) + "\n"
