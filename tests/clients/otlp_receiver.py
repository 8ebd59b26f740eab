#!/usr/bin/env python3
"""A small OTLP/HTTP collector for tests: takes POSTs of JSON on 127.0.0.1 (port 0), appends
each body as one line to OUT, and writes its port to PORT_FILE once listening.

    otlp_receiver.py PORT_FILE OUT
"""
import http.server
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        with open(sys.argv[2], "ab") as f:
            f.write(self.path.encode() + b" " + body.replace(b"\n", b" ") + b"\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
