#!/usr/bin/env python3
"""Hostile idle clients for the metrics endpoint: N connections, each from
its own loopback address (127.0.1.1, 127.0.1.2, ...), that never complete a
request. Half send nothing; half dribble a TLS ClientHello or an HTTP request
head one byte every 2 s (slowloris). A connection the server closes is opened
again at once, so the idlers keep every slot they can. Stops by itself after
SECONDS (or at SIGTERM); prints how many connections were open at the end
and how many the server closed.

usage: idlers.py HOST PORT N SECONDS
"""
import selectors
import signal
import socket
import sys
import time

host, port, n, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
# The first bytes of a TLS ClientHello record, and of an HTTP request head.
DRIBBLE = [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),
           b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 64]
sel = selectors.DefaultSelector()
conns = {}  # slot -> (socket, bytes sent)
closed = 0
opened = 0


def source(i):
    return "127.0.%d.%d" % (1 + i // 250, 1 + i % 250)


def connect(i):
    global opened
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((source(i), 0))
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    sel.register(s, selectors.EVENT_READ, i)
    conns[i] = (s, 0)
    opened += 1


for i in range(n):
    connect(i)
end = time.monotonic() + seconds


def stop(*_):
    global end
    end = 0


signal.signal(signal.SIGTERM, stop)
next_drip = time.monotonic() + 2
while time.monotonic() < end:
    for key, _ in sel.select(timeout=0.2):
        i = key.data
        s = key.fileobj
        try:
            data = s.recv(4096)
        except (ConnectionError, OSError):
            data = b""
        if not data:  # closed by the server: come back at once
            sel.unregister(s)
            s.close()
            closed += 1
            connect(i)
    if time.monotonic() >= next_drip:
        next_drip += 2
        for i, (s, sent) in list(conns.items()):
            if i % 2 == 0:
                continue
            msg = DRIBBLE[(i // 2) % 2]
            if sent < len(msg):
                try:
                    s.send(msg[sent:sent + 1])
                    conns[i] = (s, sent + 1)
                except OSError:
                    pass
print("idlers: %d connections from %d addresses; %d opened, %d closed by the server"
      % (len(conns), n, opened, closed))
