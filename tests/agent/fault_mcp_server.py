#!/usr/bin/env python3
"""A misbehaving MCP stdio server for the MCP client's fault tests.

Usage: fault_mcp_server.py MODE
  It completes the handshake (initialize, tools/list: one tool "probe" taking {"x": number})
  and then answers tools/call according to MODE:
    ok       "probe <x>"
    hang     never answers (the client's per-call timeout must fire)
    crash    exits with status 3 before answering (once per process)
    garbage  writes a line that is not JSON-RPC
    slow:S   "probe <x>" after S seconds; calls are answered concurrently (one thread each), so
             a call's latency is S whatever else is in flight (the agent benchmark's latency tool)
"""
import json
import sys
import threading
import time

mode = sys.argv[1]
tool = {"name": "probe", "description": "test tool",
        "inputSchema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}


lock = threading.Lock()


def send(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def answer_later(mid, x, delay):
    time.sleep(delay)
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "probe %s" % x}]}})


for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                                       "serverInfo": {"name": "fault", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool]}})
    elif method == "tools/call":
        if mode == "hang":
            continue
        if mode == "crash":
            sys.exit(3)
        if mode == "garbage":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
            continue
        x = msg["params"]["arguments"].get("x")
        if mode.startswith("slow:"):
            threading.Thread(target=answer_later, args=(mid, x, float(mode[5:])), daemon=True).start()
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "probe %s" % x}]}})
