"""Benchmark: how fast the staged start and status.yml find a dead rank, against the engine's own timeouts.

On the served test-bed pair (run `make demo` first), with the real vLLM CPU engine:
  (a) worker killed while the head waits / loads      seconds from the kill to the start watch's DETECTED line
  (b) worker cannot start (its import fails)          seconds from the worker's exit to DETECTED
  (b) wrong master address                            seconds for the whole run that refuses it (nothing starts)
  (d) worker killed after ready (/health still 200)   seconds from the kill to status.yml's report
  (i) the same under the head's watchdog               seconds from the kill until clients see /health fail
  (j) the same with auto_restart                       seconds from the kill until a chat answers again
  (f) worker's fast link set down mid-start            seconds from the fault to DETECTED
  (g) MTU lowered to 1500 on one end mid-start         seconds from the fault to DETECTED
  (h) head's master port dropped by a firewall rule    seconds from the fault to DETECTED
  (m) worker rank frozen whole mid-start (SIGSTOP)     seconds from the freeze to DETECTED (the freeze rule)
  (k) worker process alone frozen mid-start            seconds from the freeze to DETECTED (the idle rule)
  (l) engine core frozen after ready, watchdog         seconds from the freeze to the watchdog's trip
and for every start fault the seconds from the DETECTED line to the playbook's end (rollback off: no restart),
each with its ratio to the engine's own bounds: the test bed's distributed timeout (300 s), NCCL's 601 s on Sparks
and gloo's 1801 s (this CPU build's default), and the no-op rerun of the deploy stage: wall time, changed count,
containers restarted (must be 0).

    python tests/bench/start_faults_bench.py          # every fault
    python tests/bench/start_faults_bench.py m k l f  # only the faults with these letters
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.testbed import service_faults as sf


def serving_again_under_the_watchdog():
    """The watchdog's automatic restart (the testbed profile sets auto_restart): seconds from its start until a chat
    answers again, the figure to compare with a fresh start's load."""
    result = sf.kill_worker_under_the_watchdog()
    return dict(result, seconds=result["serving_again_s"])


NO_ROLLBACK = sf.CHANGED_NO_ROLLBACK  # a failed start's own end, without the rollback's start


def main(letters):
    sf.ensure_serving()
    noop = sf.noop_rerun()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for label, scenario in [
            ("(a) worker killed during start", sf.kill_worker_during_start),
            ("(b) worker cannot start", lambda: sf.worker_cannot_start(Path(folder))),
            ("(b) wrong master address, refused before the start", sf.wrong_master_address),
            ("(d) worker killed after ready", sf.kill_worker_after_ready),
            ("(i) worker killed after ready, then the watchdog: /health fails", sf.kill_worker_under_the_watchdog),
            ("(j) the same, auto_restart: a chat answers again", serving_again_under_the_watchdog),
            ("(f) worker's fast link down mid-start", sf.link_down_during_start),
            ("(g) MTU 1500 on one end mid-start", sf.mtu_lowered_during_start),
            ("(h) head's master port dropped mid-start", sf.master_port_dropped_during_start),
            ("(m) worker rank frozen whole mid-start", lambda: sf.rank_frozen_during_start(1)),
            ("(k) worker process alone frozen mid-start", lambda: sf.worker_process_frozen_during_start(NO_ROLLBACK)),
            ("(l) engine core frozen after ready, watchdog", sf.engine_core_frozen_under_the_watchdog),
        ]:
            if letters and label[1] not in letters:
                continue
            sf.ensure_serving()
            result = scenario()
            rows.append((label, result["seconds"], result.get("ended_s"), result.get("rc", "-")))
    sf.ensure_serving()

    print(
        f"\n| fault | detected after (s) | run ended after DETECTED (s) | ratio to test bed {sf.TESTBED_TIMEOUT_S} s "
        "| ratio to NCCL 601 s | ratio to gloo 1801 s | playbook rc |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, seconds, ended_s, rc in rows:
        ended = "-" if ended_s is None else f"{ended_s:.1f}"
        if seconds is None:
            print(f"| {label} | not detected | {ended} | - | - | - | {rc} |")
            continue
        ratios = " | ".join(
            f"{seconds / bound:.4f}" for bound in (sf.TESTBED_TIMEOUT_S, sf.NCCL_TIMEOUT_S, sf.GLOO_TIMEOUT_S)
        )
        print(f"| {label} | {seconds:.1f} | {ended} | {ratios} | {rc} |")
    print("\n| no-op rerun (site.yml --tags deploy) | wall (s) | changed | containers restarted |")
    print("|---|---|---|---|")
    print(f"| pair | {noop['seconds']:.1f} | {noop['changed']} | {noop['restarts']} |")


if __name__ == "__main__":
    main(set(sys.argv[1:]))
