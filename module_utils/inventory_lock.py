"""One lock per inventory, a file on the head: who may change the service now (deploy, rollback, the watchdog's
restart). Pure Python (no Ansible): action_plugins/spark_lock.py (deploy, rollback) and the head's watchdog decide
with it; neither holds a process open for it, so a holder that died leaves a lock its successor can prove stale.

A lock is one JSON object: kind (deploy, rollback or watchdog), host (the controller's name, or the head's for the
watchdog), pid, command, since (epoch seconds) and token (what its release must present).
"""

import json
import time

# A deploy lock older than this is no longer honoured by the watchdog: a controller that died mid-deploy must not
# leave the service unguarded for good (a deploy's stage runs one load and the gate: well under an hour).
DEPLOY_LOCK_STALE_S = 7200


def parse(text):
    """The lock's holder as a dict, None when there is no lock, {} when the file is unreadable (a cut write)."""
    if not text.strip():
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def describe(holder, now=None):
    """'deploy by ctl pid 4242 (ansible-playbook site.yml --tags deploy) since 2026-12-04T03:50:00Z (12 s)'."""
    since = float(holder.get("since", 0))
    age = f" ({(now or time.time()) - since:.0f} s)" if since else ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)) if since else "?"
    return (
        f"{holder.get('kind', '?')} by {holder.get('host', '?')} pid {holder.get('pid', '?')} "
        f"({holder.get('command', '?')}) since {stamp}{age}"
    )


def decide(holder, me, holder_alive):
    """What a deploy or rollback `me` does about the lock it found: ("take", why) when it is free or provably
    stale, ("stop", why) when the watchdog holds it (the deploy stops its look or restart first), ("refuse", why)
    when another live deploy holds it. holder_alive: whether the holder's pid still runs, checked where it runs
    (None when that cannot be checked from here: another controller)."""
    if holder is None:
        return "take", "free"
    if not holder:
        return "take", "an unreadable lock file (cut short): replaced"
    if holder.get("kind") == "watchdog":
        return ("stop", describe(holder)) if holder_alive else ("take", f"stale: {describe(holder)}, gone")
    if holder.get("host") == me.get("host") and holder_alive is False:
        return "take", f"stale: {describe(holder)}, which no longer runs on this controller"
    return "refuse", describe(holder)


def refusal(holder, path):
    """The message of a refused deploy: who holds the lock and how to break one that is provably stale."""
    return (
        f"another change of this service is running: {describe(holder)}; lock {path} on the head. Wait for it, or "
        "if that run is gone (its controller crashed), run again with -e spark_serve_break_lock=true"
    )


def watchdog_may_act(holder, now, holder_alive):
    """(True, '') when the watchdog may take the lock, else (False, why): a deploy or rollback holds it (unless it is
    older than DEPLOY_LOCK_STALE_S), or another watchdog process that still runs."""
    if not holder:
        return True, ""
    if holder.get("kind") == "watchdog":
        return (False, f"{describe(holder, now)} holds the lock") if holder_alive else (True, "")
    if now - float(holder.get("since", 0)) < DEPLOY_LOCK_STALE_S:
        return False, f"{describe(holder, now)} holds the lock"
    return True, ""
