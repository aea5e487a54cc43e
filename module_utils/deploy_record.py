"""Deployment records: what ran, how it started and whether it passed the gate, so the last good combination
can be restored (seed 000's rule). One JSON file (machine-readable) and one Markdown file (for people) per deploy,
never deleted by the project.

The controller's records are its own truth. A head keeps copies (a fresh clone of the controller recovers from
them), but a copy is used only when it verifies: vllm_record signs every record with an HMAC-SHA256 under a key only
the controller holds (<controller dir>/record-key), and library/vllm_record_import.py checks each head copy (its
signature, its name, every hash field) before it joins the controller's records.

Pure Python (no Ansible) so plain pytest can test it; library/vllm_record.py, library/vllm_record_info.py and
library/vllm_record_import.py read and write the files.
"""

import contextlib
import hashlib
import hmac
import json
import os
import re
import tempfile


def record_id(created_utc, inventory, kind):
    """File-name-safe id that sorts by time: 20261201T071500.123456Z-testbed-pair-deploy (microseconds, and
    write_once refuses an existing name, so two controllers cannot write one id)."""
    return f"{created_utc}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', inventory)}-{kind}"


def write_once(path, text, mode=0o644):
    """Write `text` to `path` whole or not at all: a temporary file beside it (0600 from its creation), fsynced,
    given `mode`, then linked to its name (FileExistsError when the name exists: a record is never overwritten), then
    the directory fsynced. A crash or a full disk leaves at most a temporary file, never a truncated record."""
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".writing-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
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


# The record key: 32 random bytes, kept as 64 hex characters in a file only the controller's user may read.
KEY_BYTES = 32
SIGNATURE = "signature"
SIGNATURE_ALG = "hmac-sha256"
SHA256_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class RecordKeyError(ValueError):
    """The record key file cannot be used (named by path and rule, never by its content)."""


def read_key(path):
    """The record key in `path`: its file must hold 64 lowercase hex and be readable by its owner only (a key others
    can read signs nothing the controller alone could have written)."""
    try:
        mode = os.stat(path).st_mode & 0o777
        with open(path, encoding="ascii") as source:
            text = source.read().strip()
    except OSError as err:
        raise RecordKeyError(f"record key file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:  # its message would quote a byte of the key
        raise RecordKeyError(f"record key file {path}: its content is not 64 lowercase hex characters") from None
    if mode & 0o077:
        raise RecordKeyError(
            f"record key file {path}: mode {mode:04o}; rule: the record key is readable by its owner only "
            f"(chmod 600 {path})"
        )
    if not SHA256_HEX.match(text):
        raise RecordKeyError(f"record key file {path}: its content is not 64 lowercase hex characters (32 bytes)")
    return bytes.fromhex(text)


def ensure_key(path):
    """The record key in `path`, created on first use (32 random bytes, 0600, written whole; a controller running
    at the same time keeps the one written first)."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another run created it first: that one is the key
            write_once(path, os.urandom(KEY_BYTES).hex() + "\n", mode=0o600)
    return read_key(path)


def key_id(key):
    """A short name of a key that reveals nothing of it: tells "signed by another controller" from "changed"."""
    return hashlib.sha256(b"spark-serve record key id\0" + key).hexdigest()[:16]


def canonical(record):
    """The bytes a signature covers: the record without its signature, as sorted compact ASCII JSON (one form for
    one content, whatever the file's indentation)."""
    content = {name: value for name, value in record.items() if name != SIGNATURE}
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def sign(record, key):
    """The record with its signature: HMAC-SHA256 of its canonical form under the controller's key. Sign the record
    as it reads back from its JSON (json.loads(json.dumps(...))), so the reader's canonical form is the same."""
    value = hmac.new(key, canonical(record), hashlib.sha256).hexdigest()
    return dict(record, **{SIGNATURE: {"alg": SIGNATURE_ALG, "key_id": key_id(key), "value": value}})


def signature_problem(record, key):
    """None when `record` carries a valid signature under `key`, else why not (an unsigned record is refused: only
    the controller's own files are trusted without one)."""
    signature = record.get(SIGNATURE)
    if signature is None:
        return "it carries no signature; rule: a head's copy is used only when the controller's key signed it"
    if not isinstance(signature, dict):
        return f"signature {str(signature)[:80]!r} is not a mapping of alg, key_id and value"
    if signature.get("alg") != SIGNATURE_ALG:
        return f"signature.alg {str(signature.get('alg'))[:40]!r} is not {SIGNATURE_ALG}"
    value = str(signature.get("value", ""))
    if not SHA256_HEX.match(value):
        return f"signature.value {value[:80]!r} is not 64 lowercase hex"
    expected = hmac.new(key, canonical(record), hashlib.sha256).hexdigest()
    if hmac.compare_digest(expected, value):
        return None
    if signature.get("key_id") != key_id(key):
        return (
            f"signed with another key (key id {str(signature.get('key_id'))[:40]!r}, this controller's is "
            f"{key_id(key)!r}); rule: only this controller's key is trusted"
        )
    return "its content does not match its signature (changed after it was signed)"


def hash_fields(value, where=""):
    """(field path, value, pattern, rule) of every hash field in a record: `sha256`, `*_sha256` and `config_hash`
    (64 hex), and `digest` and image `id` (sha256:<64 hex>)."""
    if isinstance(value, dict):
        for name, item in value.items():
            path = f"{where}.{name}" if where else str(name)
            if isinstance(item, (dict, list)):
                yield from hash_fields(item, path)
            elif name == "sha256" or str(name).endswith("_sha256") or name == "config_hash":
                yield path, item, SHA256_HEX, "64 lowercase hex"
            elif name == "digest" or path == "image.id":
                yield path, item, SHA256_DIGEST, "sha256:<64 lowercase hex>"
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from hash_fields(item, f"{where}[{index}]")


def hash_problems(record):
    """Every hash field of a record that is not a hash: named by field, value and rule. An empty value means "not
    known" (a record without a snapshot manifest, an image pulled without an id); an overlay's hash names a stored
    file and must be there (overlay_problems)."""
    return overlay_problems(record) + [
        f"{path} {str(value)[:80]!r} is not {rule}"
        for path, value, pattern, rule in hash_fields(record)
        if not path.startswith("overlays[") and value not in ("", None) and not pattern.match(str(value))
    ]


def head_copy_problem(name, text, key):
    """(record, None) when a head's copy named `name` (<id>.json) with content `text` may join the controller's
    records, else (None, why not): it must parse, be named by its own id, hold only well-formed hashes and carry the
    controller's signature over exactly this content."""
    try:
        record = json.loads(text)
    except ValueError as err:
        return None, f"not JSON ({err})"
    if not isinstance(record, dict) or not record.get("id"):
        return None, "not a deployment record (no id)"
    if name != f"{record['id']}.json":
        return None, f"its file name is not its id ({str(record['id'])[:80]!r}); rule: a record is <id>.json"
    problems = hash_problems(record)
    if problems:
        return None, "; ".join(problems)
    problem = signature_problem(record, key)
    return (None, problem) if problem else (record, None)


# The only names the controller takes from a head's records folder: a record, <record_id>.json (a UTC time, with
# microseconds since records are written whole, then the inventory and kind in record_id's characters), and an
# overlay text, overlays/<its sha256>. fullmatch: `$` would also pass a name that ends in a newline.
RECORD_FILE = re.compile(r"[0-9]{8}T[0-9]{6}(?:\.[0-9]{6})?Z-[A-Za-z0-9_.-]+\.json")
OVERLAY_FILE = re.compile(r"overlays/[0-9a-f]{64}")
COPY_RULE = "rule: a head's copy is a regular file <id>.json or overlays/<64 lowercase hex> in its records folder"
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def copy_name_problem(name):
    """None when `name`, relative to a records folder, is a record's or an overlay text's, else why not."""
    if RECORD_FILE.fullmatch(name) or OVERLAY_FILE.fullmatch(name):
        return None
    return f"name {name[:120]!r} is neither <id>.json nor overlays/<64 lowercase hex>; {COPY_RULE}"


def shown_path(path):
    """A reported path as a message names it: quoted with its control characters escaped (a warning stays one
    line), a very long one by its start and its end (where a `..` leads)."""
    return repr(path if len(path) <= 400 else f"{path[:100]}...{path[-300:]}")


def reported_path_problem(path, root):
    """Why a path a head reported is not a file directly in `root` (its records folder) or in root/overlays, before
    its name is looked at; None when it is."""
    if not isinstance(path, str):
        return f"path {repr(path)[:120]} is not a string; {COPY_RULE}"
    shown = shown_path(path)
    if CONTROL_CHARACTER.search(path):
        return f"path {shown} holds a control character (NUL, newline, ...); {COPY_RULE}"
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        return f"path {shown} is not in {root}; {COPY_RULE}"
    if ".." in path[len(prefix) :].split("/"):
        return f"path {shown} has a '..' component; {COPY_RULE}"
    problem = copy_name_problem(path[len(prefix) :])
    return f"path {shown}: {problem}" if problem else None


def head_copy_name(entry, root):
    """(name, None) for a file the head's find reported (`entry`: its path, islnk and isreg) that is a record or an
    overlay text in `root`, its records folder: the name relative to root, the only part of the path the controller
    uses. (None, why) for anything else, decided before anything is read: the head chose the path, and a `..`,
    another folder or a link would have the controller read or write where the head says."""
    entry = entry if isinstance(entry, dict) else {"path": entry}  # a forged listing may hold anything
    path = entry.get("path")
    problem = reported_path_problem(path, root)
    if problem:
        return None, problem
    islnk, isreg = entry.get("islnk"), entry.get("isreg")
    if islnk or isreg is not True:  # a link would have the head read where it points
        return None, f"path {shown_path(path)} is not a regular file (islnk {islnk!r}, isreg {isreg!r}); {COPY_RULE}"
    return path[len(root.rstrip("/")) + 1 :], None


def overlay_text_problem(name, data):
    """None when a head's overlay text named `name` is the text of that hash (64 lowercase hex, re-hashed), else
    why not."""
    if not SHA256_HEX.match(name):
        return f"its name {name[:80]!r} is not 64 lowercase hex"
    actual = hashlib.sha256(data).hexdigest()
    return None if actual == name else f"its text hashes to {actual}, not to its name"


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
