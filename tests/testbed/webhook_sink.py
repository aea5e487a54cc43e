"""A notification hook for the test bed's Alertmanager (roles/monitoring's webhook receiver): every POST body is
appended as one JSON line with the time it arrived. Run inside the monitoring node, on its loopback.

    python3 webhook_sink.py PORT OUTPUT.jsonl
"""

import http.server
import json
import sys
import time


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(self.server.output, "a", encoding="utf-8") as out:
            out.write(json.dumps({"received": time.time(), "path": self.path, "body": json.loads(body)}) + "\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)
    server.output = sys.argv[2]
    server.serve_forever()
