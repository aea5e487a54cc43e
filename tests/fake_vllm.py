"""A stand-in for a vLLM server's OpenAI API on 127.0.0.1 (no engine): streaming chat completions with usage and
cached tokens, a forced tool call, /metrics counters that move with the requests, and an optional API key.

A prompt seen before reports its whole blocks of BLOCK (or cache_block) words as cached, like prefix caching;
every request decodes max_tokens one-word chunks.
"""

import contextlib
import http.server
import json
import threading
from collections import namedtuple

BLOCK = 16
TOOL_ARGUMENTS = '{"city": "Paris"}'

Request = namedtuple("Request", "method path headers body")  # body: the parsed JSON of a POST, else None


class LoopbackServer:
    """An HTTP server on 127.0.0.1 (an unused port) in a daemon thread: the one home of the test fakes' server
    plumbing. `answer(request)` returns (status, headers, chunks of bytes); a client that hangs up mid-answer (a
    watchdog that timed out) is no error."""

    def __init__(self, answer):
        def serve(handler):
            length = int(handler.headers.get("Content-Length") or 0)
            body = json.loads(handler.rfile.read(length)) if length else None
            status, headers, chunks = answer(Request(handler.command, handler.path, handler.headers, body))
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for chunk in chunks:
                    handler.wfile.write(chunk)

        handler = type(
            "Handler",
            (http.server.BaseHTTPRequestHandler,),
            {"do_GET": serve, "do_POST": serve, "log_message": lambda *args: None},
        )
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # A short poll interval: shutdown() waits up to one interval.
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def event_stream(chunks):
    """Server-sent events of JSON chunks, as vLLM streams a completion."""
    return [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks] + [b"data: [DONE]\n\n"]


class FakeVllm:
    def __init__(self, api_key=None, served=0, cache_block=None):
        self.api_key = api_key
        self.cache_block = cache_block  # reported as vllm:cache_config_info's block_size label when set
        self.requests = []  # (path, Authorization header, body or None)
        self.counters = {"vllm:request_success_total": served, "vllm:prefix_cache_queries_total": 0}
        self.counters["vllm:prefix_cache_hits_total"] = 0
        self.prompts = set()
        self.loopback = LoopbackServer(self.answer)
        self.url = self.loopback.url

    def close(self):
        self.loopback.close()

    def answer(self, request):
        authorization = request.headers.get("Authorization")
        self.requests.append((request.path, authorization, request.body))
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            return 401, {}, [b'{"error": "invalid api key"}']
        if request.method == "POST":
            return 200, {"Content-Type": "text/event-stream"}, event_stream(list(self.stream(request.body)))
        text = "".join(f"{name} {value}\n" for name, value in self.counters.items())
        if self.cache_block:
            text += f'vllm:cache_config_info{{block_size="{self.cache_block}",engine="0"}} 1.0\n'
        return 200, {}, [("# TYPE vllm:request_success_total counter\n" + text).encode()]

    def stream(self, body):
        """The chunks of one streamed completion; moves the counters as a server would."""
        prompt = body["messages"][0]["content"]
        tokens = len(prompt.split())
        block = self.cache_block or BLOCK
        cached = tokens // block * block if prompt in self.prompts else 0
        self.prompts.add(prompt)
        self.counters["vllm:prefix_cache_queries_total"] += tokens
        self.counters["vllm:prefix_cache_hits_total"] += cached
        self.counters["vllm:request_success_total"] += 1
        if body.get("tools"):
            name = body["tool_choice"]["function"]["name"]
            call = {"index": 0, "function": {"name": name, "arguments": TOOL_ARGUMENTS}}
            yield {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
            completion = 1
        else:
            for _ in range(body["max_tokens"]):
                yield {"choices": [{"index": 0, "delta": {"content": "x"}}]}
            completion = body["max_tokens"]
        usage = {
            "prompt_tokens": tokens,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": usage}


def unused_port():
    """A loopback port nothing listens on: one the system just handed out, closed again."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return port
