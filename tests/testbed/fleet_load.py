"""A bounded client load of multi-turn chat sessions through the fleet's router, as a team's agents send it.

Each session is a thread: turn after turn, the whole conversation so far plus a new question, streamed, with the
session's X-Session-ID (the router's affinity key) and the API key. Every request is recorded: when it was sent,
its time to first token, its cached prompt tokens (the replica's prefix cache) and its error, if any.
"""

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import namedtuple
from dataclasses import dataclass

MODEL = "tiny-llama"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]


Answer = namedtuple("Answer", "ttft_s cached_tokens prompt_tokens")


@dataclass
class Sent:
    session: str
    turn: int
    started: float
    ttft_s: float | None
    cached_tokens: int
    error: str


def question(session, turn, words=48):
    """A distinct user turn of `words` words (several cache blocks, so a repeat prefix can hit)."""
    return " ".join(f"{WORDS[(turn * 7 + i) % len(WORDS)]}{session}" for i in range(words))


def stream_chat(url, key, ca_file, session, messages, max_tokens=4, timeout_s=120):
    """The Answer (time to first token, cached and prompt tokens) of one streamed chat through `url`; raises on any
    failure."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True}
    body["stream_options"] = {"include_usage": True}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}", "X-Session-ID": session}
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
    context = ssl.create_default_context(cafile=ca_file)
    started, ttft, usage, done = time.monotonic(), None, {}, False
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[6:])
            if ttft is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                ttft = time.monotonic() - started
            usage = chunk.get("usage") or usage
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Answer(ttft, cached, usage.get("prompt_tokens", 0))


class SessionLoad:
    """`sessions` conversations at once, each at most `max_turns` turns (then it starts over), until stop()."""

    def __init__(self, url, key, ca_file, sessions=4, max_turns=6, pause_s=0.2, limit_s=1800):
        self.url, self.key, self.ca_file = url, key, ca_file
        self.max_turns, self.pause_s, self.limit_s = max_turns, pause_s, limit_s
        self.sent = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.session, args=(f"s{n}",), daemon=True) for n in range(sessions)]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=180)

    def session(self, name):
        deadline = time.monotonic() + self.limit_s
        messages, turn = [], 0
        while not self.stopping.is_set() and time.monotonic() < deadline:
            if turn == self.max_turns:
                messages, turn = [], 0
            messages.append({"role": "user", "content": question(name, turn)})
            started, error, ttft, cached = time.monotonic(), "", None, 0
            try:
                ttft, cached, _ = stream_chat(self.url, self.key, self.ca_file, name, messages)
            except (urllib.error.URLError, OSError, ValueError, RuntimeError) as err:
                error = str(getattr(err, "reason", None) or err)[:300]
            self.sent.append(Sent(name, turn, started, ttft, cached, error))
            messages.append({"role": "assistant", "content": "ok"})
            turn += 1
            self.stopping.wait(self.pause_s)

    def between(self, start, end):
        return [s for s in self.sent if start <= s.started < end]


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else None
