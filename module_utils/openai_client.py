"""Client side of a vLLM server's OpenAI-compatible API: /metrics and measured streaming chat completions.

Standard library only (no Ansible) so every module that talks to the server (vllm_acceptance, vllm_diagnose,
vllm_benchmark) measures a request the same way, and plain pytest can drive it against a fake server.
"""

import http.client
import json
import ssl
import time
import urllib.error
import urllib.request

from ansible.module_utils.acceptance import parse_metrics

# Planned-request keys copied into the request body when present. `ignore_eos` is vLLM's sampling extension:
# the benchmark uses it so every request decodes exactly max_tokens tokens; `user` (OpenAI's) is what a
# session-affine router keys on when no X-Session-ID header comes.
OPTIONAL_BODY_KEYS = ("tools", "tool_choice", "ignore_eos", "user")


class ServerUnreachable(RuntimeError):
    """The server did not answer (refused, reset, timed out): a transport error, not a measurement."""


def api_argument_spec(**module_options):
    """Argument spec of a module that talks to the service's OpenAI API: url, model and api_key_file (documented
    once, in doc_fragments/vllm_api.py) and the module's own options."""
    return dict(
        url=dict(type="str", required=True),
        model=dict(type="str", required=True),
        api_key_file=dict(type="path", no_log=False),
        ca_file=dict(type="path"),
        **module_options,
    )


def read_api_key(path):
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip() or None


def module_api_key(module):
    """The key in the module's api_key_file (None without one), masked in all of the module's output.

    Fails the module, naming the file, when it cannot be read (the duck-typed module keeps this file free of
    Ansible imports).
    """
    path = module.params["api_key_file"]
    try:
        api_key = read_api_key(path)
    except OSError as err:
        module.fail_json(msg=f"api_key_file {path}: {err.strerror}")
    if api_key:
        module.no_log_values.add(api_key)  # masks the key should any returned text ever contain it
    return api_key


def module_tls_context(module):
    """The TLS context that trusts only the module's ca_file (the front door's CA), or None (the system's store).

    Fails the module, naming the file, when it cannot be read.
    """
    path = module.params["ca_file"]
    if not path:
        return None
    try:
        return ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as err:
        module.fail_json(msg=f"ca_file {path}: {getattr(err, 'strerror', None) or err}")


def _headers(api_key):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _http_error_text(err):
    try:
        body = err.read().decode("utf-8", "replace")
    except OSError:
        body = ""
    return f"HTTP {err.code} {err.reason}: {body[:300]}" if body else f"HTTP {err.code} {err.reason}"


def read_metrics(url, api_key, timeout_s, context=None):
    """{metric: value} from GET <url>/metrics; ServerUnreachable when it cannot be read."""
    return parse_metrics(read_metrics_text(url, api_key, timeout_s, context))


def read_metrics_text(url, api_key, timeout_s, context=None):
    """The exposition text of GET <url>/metrics (labels included); ServerUnreachable when it cannot be read."""
    request = urllib.request.Request(f"{url}/metrics", headers=_headers(api_key))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            return response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        raise ServerUnreachable(f"GET {url}/metrics: {_http_error_text(err)}") from err
    except (urllib.error.URLError, OSError) as err:
        raise ServerUnreachable(f"GET {url}/metrics: {getattr(err, 'reason', err)}") from err


def _carries_token(delta):
    # Reasoning text is generated output too: a reasoning model's first token is a reasoning token.
    return bool(
        delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls")
    )


def stream_chat(url, model, planned, api_key, timeout_s, context=None):
    """Send one planned request as a streaming chat completion and measure it.

    `planned` holds name, kind, messages, max_tokens and optionally the keys of OPTIONAL_BODY_KEYS.
    Returns ttft_s and last_token_s (seconds from sending to the first and last chunk carrying a token),
    prompt/completion/cached tokens from the final usage chunk, finish_reason, tool_calls (name and accumulated
    argument text), and error for an HTTP or in-stream error.
    Raises ServerUnreachable when the server does not answer or stops answering. `context`: the TLS context of an
    https url (module_tls_context).
    """
    body = {
        "model": model,
        "messages": planned["messages"],
        "max_tokens": planned["max_tokens"],
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for key in OPTIONAL_BODY_KEYS:
        if key in planned:
            body[key] = planned[key]
    measurement = {
        "name": planned["name"],
        "kind": planned["kind"],
        "ttft_s": None,
        "last_token_s": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "cached_tokens": None,
        "finish_reason": None,
        "tool_calls": [],
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers=_headers(api_key)
    )
    calls = {}
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            for raw in response:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                now = time.monotonic() - started
                if now > timeout_s:
                    raise ServerUnreachable(f"{planned['name']}: no end of the stream within {timeout_s:.0f} s")
                chunk = json.loads(data)
                if chunk.get("error"):
                    measurement["error"] = f"error in the stream: {json.dumps(chunk['error'])[:300]}"
                    break
                usage = chunk.get("usage")
                if usage:
                    details = usage.get("prompt_tokens_details") or {}
                    measurement.update(
                        prompt_tokens=usage.get("prompt_tokens"),
                        completion_tokens=usage.get("completion_tokens"),
                        cached_tokens=details.get("cached_tokens"),
                    )
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if _carries_token(delta):
                        if measurement["ttft_s"] is None:
                            measurement["ttft_s"] = now
                        measurement["last_token_s"] = now
                    for call in delta.get("tool_calls") or []:
                        slot = calls.setdefault(call.get("index", 0), {"name": None, "arguments": ""})
                        function = call.get("function") or {}
                        slot["name"] = function.get("name") or slot["name"]
                        slot["arguments"] += function.get("arguments") or ""
                    measurement["finish_reason"] = choice.get("finish_reason") or measurement["finish_reason"]
    except urllib.error.HTTPError as err:
        measurement["error"] = _http_error_text(err)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
        raise ServerUnreachable(
            f"{planned['name']}: POST {url}/v1/chat/completions: {getattr(err, 'reason', err)}"
        ) from err
    except ValueError as err:
        measurement["error"] = f"unreadable stream chunk: {err}"
    measurement["tool_calls"] = [calls[index] for index in sorted(calls)]
    return measurement
