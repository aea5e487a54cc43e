#!/usr/bin/python
"""Ansible module: seed 000's benchmark (cold and hot TTFT, decode tok/s by input length) with table and chart."""

DOCUMENTATION = r"""
---
module: vllm_benchmark
short_description: Measure cold and hot time to first token and decode speed of a vLLM server by input length
description:
  - For every input length, sends one at a time as streaming chat completions a short warm-up, a cold request
    whose prompt starts with a new nonce (nothing of it can be cached), and the identical prompt twice (hot).
    Every request asks for I(max_tokens) with C(ignore_eos), so every request decodes exactly that many tokens.
  - Per length it reports prompt tokens, cold TTFT, hot TTFT (mean of the two), hot cached tokens (the smaller;
    the server needs C(--enable-prompt-tokens-details)) and decode tokens/s (mean over cold and hot), computed from
    the per-request measurements (module_utils/bench_report.py).
  - Writes C(bench-<UTC time>.json) (raw measurements and rows), C(.md) (table, and the comparison with
    I(compare_with) when given) and C(.png) (TTFT and decode speed by input length) into I(dest).
  - Fails, after writing the files, when a request failed or did not decode exactly I(max_tokens) tokens, and at
    once when the server does not answer.
  - Runs on the controller (delegate_to localhost). In check mode nothing is sent and nothing is written.
options:
  input_words:
    description: Input lengths in words (the prompt's filler text; the question adds a few dozen tokens).
    type: list
    elements: int
    default: [1000, 4000, 16000]
  max_tokens:
    description: Output tokens of every request (at least 2, so that a decode speed exists).
    type: int
    default: 64
  repeats:
    description:
      - How many times the cold and two hot requests run per input length (each time with a new nonce). With
        more than one, every figure is the median and the report shows its spread, which widens the noise band
        of the comparison where the run's own noise exceeds I(noise_pct).
    type: int
    default: 1
  dest:
    description: Directory on the controller for the JSON, Markdown and PNG files; created when missing.
    type: path
    required: true
  compare_with:
    description:
      - An earlier run's C(bench-*.json), or the id of a deployment record (C(<UTC time>-<inventory>-<kind>));
        then the newest run in I(dest) measured on that deployment. Its rows are compared with this run's per
        length and metric.
      - Resolved before any request is sent.
    type: str
  deployment:
    description:
      - The deployment record the service runs (vllm_record_info's C(latest)); its C(id), C(profile_name),
        C(status) and image reference go into the report, so that a later run can name it in I(compare_with).
    type: dict
  noise_pct:
    description:
      - Changes smaller than this many percent are marked C(~ (noise)) in the comparison; the band is wider for a
        figure whose spread over the repeats (either run's) is larger.
    type: float
    default: 3.0
  timeout_s:
    description: Timeout of one request, in seconds.
    type: float
    default: 600
requirements:
  - matplotlib (requirements.txt)
extends_documentation_fragment:
  - vllm_api
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Benchmark the service and compare with an earlier run
  vllm_benchmark:
    url: http://10.0.0.1:8000
    model: qwen3.8-flash-next
    input_words: [1000, 4000, 16000]
    max_tokens: 64
    dest: .spark-serve/bench
    compare_with: .spark-serve/bench/bench-20261201T071500Z.json
  delegate_to: localhost
  register: bench

- name: Compare with the last benchmark of a deployment that rollback.yml could restore
  vllm_benchmark:
    url: http://10.0.0.1:8000
    model: qwen3.8-flash-next
    dest: .spark-serve/bench
    deployment: "{{ records.latest }}"
    compare_with: 20261130T221501Z-spark-pair-deploy
  delegate_to: localhost
"""

RETURN = r"""
paths:
  description: The files written, under keys C(json), C(markdown) and C(png).
  returned: success
  type: dict
  sample:
    json: .spark-serve/bench/bench-20261201T080000Z.json
    markdown: .spark-serve/bench/bench-20261201T080000Z.md
    png: .spark-serve/bench/bench-20261201T080000Z.png
rows:
  description: One row per input length (input_words, prompt_tokens, cold_ttft_s, hot_ttft_s, hot_cached_tokens,
    decode_tps, repeats, spread_pct); a figure no request produced is null.
  returned: success
  type: list
  elements: dict
  sample:
    - {input_words: 1000, prompt_tokens: 1310, cold_ttft_s: 1.2, hot_ttft_s: 0.3, hot_cached_tokens: 1296,
       decode_tps: 60.0, repeats: 1, spread_pct: {}}
compared_with:
  description: The earlier run's C(bench-*.json) the comparison used; empty without I(compare_with).
  returned: success
  type: str
  sample: /work/.spark-serve/bench/bench-20261130T221501Z.json
comparison:
  description: Per input length in both runs and metric, earlier, new, ratio, change_pct, better (lower or
    higher), noise_band_pct and verdict (better, worse, C(~ (noise)), or null without a ratio); empty without
    I(compare_with).
  returned: success
  type: list
  elements: dict
  sample:
    - {input_words: 1000, metric: decode_tps, earlier: 58.0, new: 60.0, ratio: 1.034, change_pct: 3.4,
       better: higher, noise_band_pct: 3.0, verdict: better}
table:
  description: The rows as a Markdown table.
  returned: success
  type: str
  sample: "| input words | prompt tokens | cold TTFT (s) | ... |"
comparison_table:
  description: The comparison as a Markdown table; empty without I(compare_with).
  returned: success
  type: str
  sample: ""
requests:
  description: Raw per-request measurements (times in seconds from sending, usage, input_words, errors).
  returned: success
  type: list
  elements: dict
  sample:
    - {name: cold-1000, kind: cold, input_words: 1000, repeat: 1, ttft_s: 1.2, last_token_s: 2.25,
       prompt_tokens: 1310, completion_tokens: 64, cached_tokens: 0, finish_reason: length, tool_calls: []}
problems:
  description: Failed requests and requests that did not decode exactly I(max_tokens) tokens.
  returned: success
  type: list
  elements: str
  sample: ["cold-4000: HTTP 400 Bad Request"]
skipped:
  description: True in check mode (nothing was sent).
  returned: check mode
  type: bool
  sample: true
"""

import glob
import json
import os
import time
import traceback
import uuid

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError:
    MATPLOTLIB_IMPORT_ERROR = traceback.format_exc()
else:
    MATPLOTLIB_IMPORT_ERROR = None

from ansible.module_utils.bench_report import (
    compare,
    comparison_table,
    markdown_table,
    newest_run_of,
    plan,
    problems,
    rows,
)
from ansible.module_utils.openai_client import (
    ServerUnreachable,
    api_argument_spec,
    module_api_key,
    module_tls_context,
    stream_chat,
)

ARGUMENT_SPEC = api_argument_spec(
    input_words=dict(type="list", elements="int", default=[1000, 4000, 16000]),
    max_tokens=dict(type="int", default=64),
    repeats=dict(type="int", default=1),
    dest=dict(type="path", required=True),
    compare_with=dict(type="str"),
    deployment=dict(type="dict"),
    noise_pct=dict(type="float", default=3.0),
    timeout_s=dict(type="float", default=600),
)


def measure(url, model, input_words, max_tokens, api_key=None, timeout_s=600.0, nonce=None, repeats=1, context=None):
    """Send the plan one request at a time; each measurement also carries its input length and repeat.

    Raises ServerUnreachable when the server does not answer: a partial run has no row to compare.
    """
    url = url.rstrip("/")
    nonce = nonce or uuid.uuid4().hex[:12]
    return [
        dict(
            stream_chat(url, model, planned, api_key, timeout_s, context),
            input_words=planned["input_words"],
            repeat=planned["repeat"],
        )
        for planned in plan(input_words, max_tokens, nonce, repeats)
    ]


def earlier_run(compare_with, dest):
    """(path, rows) of the run to compare with: a bench-*.json, or the newest run in dest of a deployment id.

    Raises ValueError naming compare_with and why.
    """
    path = os.path.expanduser(compare_with)
    if not os.path.isfile(path):
        runs = []
        for candidate in glob.glob(os.path.join(dest, "bench-*.json")):
            try:
                with open(candidate, encoding="utf-8") as handle:
                    runs.append(dict(json.load(handle), path=candidate))
            except (OSError, ValueError):
                continue  # an unreadable run cannot be the one asked for
        newest = newest_run_of(runs, compare_with)
        if newest is None:
            raise ValueError(
                f"compare_with {compare_with}: neither a bench-*.json nor a deployment with a benchmark "
                f"run in {dest} (deployments measured there: "
                f"{sorted({(r.get('deployment') or {}).get('id') for r in runs} - {None}) or 'none'})"
            )
        path = newest["path"]
    try:
        with open(path, encoding="utf-8") as handle:
            return os.path.abspath(path), json.load(handle)["rows"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"compare_with {compare_with}: not a readable bench-*.json ({err!r})") from err


def deployment_summary(record):
    """What a report keeps of the deployment record it measured (None without one)."""
    if not record:
        return None
    image = record.get("image")
    return {
        "id": record.get("id"),
        "profile_name": record.get("profile_name"),
        "status": record.get("status"),
        "image": image.get("ref") if isinstance(image, dict) else image,
    }


def write_png(path, table_rows, title):
    """Two panels by input length: cold and hot TTFT (s), decode tok/s. A missing figure leaves a gap."""
    figure = Figure(figsize=(11, 4.5))
    FigureCanvasAgg(figure)  # renders without a display
    ttft, decode = figure.subplots(1, 2)
    words = [row["input_words"] for row in table_rows]

    def series(field):
        return [float("nan") if row[field] is None else row[field] for row in table_rows]

    ttft.plot(words, series("cold_ttft_s"), marker="o", label="cold")
    ttft.plot(words, series("hot_ttft_s"), marker="o", label="hot (mean of 2)")
    ttft.set(title="Time to first token", xlabel="input words", ylabel="seconds")
    ttft.legend()
    decode.plot(words, series("decode_tps"), marker="o", color="tab:green")
    decode.set(title="Decode speed (cold and hot)", xlabel="input words", ylabel="tokens/s")
    for axes in (ttft, decode):
        axes.set_xticks(words)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def report_markdown(meta, table, comparison_text, found):
    lines = [
        f"# Benchmark {meta['created_utc']}",
        "",
        f"Model `{meta['model']}` at {meta['url']}; max_tokens {meta['max_tokens']} with ignore_eos; per input "
        f"length a warm-up, then {meta.get('repeats', 1)} time(s) one cold request (new nonce) and two hot "
        "requests with the identical prompt.",
        "",
        table,
    ]
    if meta.get("deployment"):
        deployment = meta["deployment"]
        lines[2:2] = [
            f"Measured on deployment {deployment.get('id')} (profile {deployment.get('profile_name')}, "
            f"{deployment.get('status')}, image {deployment.get('image')}).",
            "",
        ]
    if meta["compare_with"]:
        lines += [
            f"## Compared with {meta['compare_with']}",
            "",
            f"Ratio new/earlier; changes inside the noise band ({meta['noise_pct']} %, or the wider spread "
            "either run measured over its repeats) are marked ~ (noise).",
            "",
            comparison_text,
        ]
    if found:
        lines += ["## Problems (these figures are not comparable)", ""] + [f"- {problem}" for problem in found] + [""]
    return "\n".join(lines)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no benchmark request was sent")
    if MATPLOTLIB_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("matplotlib") + " (make install)", exception=MATPLOTLIB_IMPORT_ERROR)
    if params["max_tokens"] < 2:
        module.fail_json(msg=f"max_tokens {params['max_tokens']}: must be at least 2 (a decode speed needs two tokens)")
    if params["repeats"] < 1:
        module.fail_json(msg=f"repeats {params['repeats']}: must be at least 1")
    if not params["input_words"] or min(params["input_words"]) < 1:
        module.fail_json(msg=f"input_words {params['input_words']}: must be a non-empty list of positive lengths")
    earlier_path, earlier_rows = "", None
    if params["compare_with"]:
        # Resolved before sending anything: a wrong path or id must not cost a whole benchmark run.
        try:
            earlier_path, earlier_rows = earlier_run(params["compare_with"], params["dest"])
        except ValueError as err:
            module.fail_json(msg=str(err))
    api_key = module_api_key(module)
    try:
        measurements = measure(
            params["url"],
            params["model"],
            params["input_words"],
            params["max_tokens"],
            api_key=api_key,
            timeout_s=params["timeout_s"],
            repeats=params["repeats"],
            context=module_tls_context(module),
        )
    except ServerUnreachable as err:
        module.fail_json(msg=f"the benchmark cannot reach the server: {err}")

    table_rows = rows(measurements)
    comparison = compare(table_rows, earlier_rows, params["noise_pct"]) if earlier_rows is not None else []
    found = problems(measurements, params["max_tokens"])
    created = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    meta = {
        "created_utc": created,
        "url": params["url"],
        "model": params["model"],
        "input_words": params["input_words"],
        "max_tokens": params["max_tokens"],
        "repeats": params["repeats"],
        "compare_with": earlier_path,
        "noise_pct": params["noise_pct"],
        "deployment": deployment_summary(params["deployment"]),
    }
    result = {
        "rows": table_rows,
        "compared_with": earlier_path,
        "comparison": comparison,
        "table": markdown_table(table_rows),
        "comparison_table": comparison_table(comparison) if comparison else "",
        "requests": measurements,
        "problems": found,
    }
    os.makedirs(params["dest"], exist_ok=True)
    base = os.path.join(params["dest"], f"bench-{created}")
    paths = {"json": base + ".json", "markdown": base + ".md", "png": base + ".png"}
    with open(paths["json"], "w", encoding="utf-8") as out:
        json.dump(
            dict(meta, requests=measurements, rows=table_rows, comparison=comparison, problems=found),
            out,
            indent=2,
            sort_keys=True,
        )
        out.write("\n")
    with open(paths["markdown"], "w", encoding="utf-8") as out:
        out.write(report_markdown(meta, result["table"], result["comparison_table"], found))
    write_png(paths["png"], table_rows, f"{params['model']}, max_tokens {params['max_tokens']} ({created})")
    if found:
        module.fail_json(
            msg=f"{len(found)} request(s) make this run incomparable (files written to {base}.*): " + "; ".join(found),
            paths=paths,
            **result,
        )
    module.exit_json(changed=True, paths=paths, **result)


if __name__ == "__main__":
    main()
