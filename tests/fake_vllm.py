"""A stand-in for a vLLM server's OpenAI API on 127.0.0.1 (no engine): streaming chat completions with usage and
cached tokens, a forced tool call, /metrics counters that move with the requests, and an optional API key.

A prompt seen before reports its whole blocks of BLOCK (or cache_block) words as cached, like prefix caching;
every request decodes max_tokens one-word chunks.
"""

import http.server
import json
import threading

BLOCK = 16
TOOL_ARGUMENTS = '{"city": "Paris"}'


class FakeVllm:
    def __init__(self, api_key=None, served=0, cache_block=None):
        self.api_key = api_key
        self.cache_block = cache_block  # reported as vllm:cache_config_info's block_size label when set
        self.requests = []  # (path, Authorization header, body or None)
        self.counters = {"vllm:request_success_total": served, "vllm:prefix_cache_queries_total": 0}
        self.counters["vllm:prefix_cache_hits_total"] = 0
        self.prompts = set()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll interval: shutdown() waits up to one interval.
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                fake.requests.append((self.path, self.headers.get("Authorization"), None))
                if not self.authorized():
                    return
                text = "".join(f"{name} {value}\n" for name, value in fake.counters.items())
                if fake.cache_block:
                    text += f'vllm:cache_config_info{{block_size="{fake.cache_block}",engine="0"}} 1.0\n'
                self.send_response(200)
                self.end_headers()
                self.wfile.write(("# TYPE vllm:request_success_total counter\n" + text).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, self.headers.get("Authorization"), body))
                if not self.authorized():
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in fake.stream(body):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def authorized(self):
                if fake.api_key is None or self.headers.get("Authorization") == f"Bearer {fake.api_key}":
                    return True
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b'{"error": "invalid api key"}')
                return False

            def log_message(self, *args):
                pass

        return Handler

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
