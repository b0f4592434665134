#!/usr/bin/env python3
"""An inotify trace of what a trainer writes under DIR, with wall-clock
times (the standard library only: ctypes over libc's inotify):

    trace.py DIR OUT.jsonl      # runs until SIGTERM/SIGINT

One JSON line per event: t (time.time() when read), path (relative to DIR),
ev (CREATE, OPEN, MODIFY, CLOSE_WRITE, CLOSE_NOWRITE, MOVED_FROM, MOVED_TO,
DELETE; MODIFY only for the first write after an open, so a 100 MiB file is
not 25,000 lines), size (at the event, when the file still exists). Folders
created under DIR are watched as they appear (and scanned, for files made
before the watch)."""

import ctypes
import json
import os
import select
import signal
import struct
import sys
import time

EV = {0x1: None, 0x2: "MODIFY", 0x8: "CLOSE_WRITE", 0x10: "CLOSE_NOWRITE", 0x20: "OPEN",
      0x40: "MOVED_FROM", 0x80: "MOVED_TO", 0x100: "CREATE", 0x200: "DELETE"}
MASK = 0x2 | 0x8 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200
IN_ISDIR, IN_Q_OVERFLOW = 0x40000000, 0x4000


def main():
    root, out_path = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd < 0:
        sys.exit(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
    wds, modified = {}, set()
    out = open(out_path, "w")

    def emit(rel, ev, size=None):
        out.write(json.dumps({"t": time.time(), "path": rel, "ev": ev, "size": size}) + "\n")

    def watch(d):
        wd = libc.inotify_add_watch(fd, os.fsencode(d), MASK)
        if wd >= 0:
            wds[wd] = d
            for n in sorted(os.listdir(d)):  # made before the watch
                p = os.path.join(d, n)
                emit(os.path.relpath(p, root), "EXISTS", os.path.getsize(p) if os.path.isfile(p) else None)
                if os.path.isdir(p):
                    watch(p)

    os.makedirs(root, exist_ok=True)
    watch(root)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while not stop:
        try:
            r, _, _ = select.select([fd], [], [], 0.2)
        except InterruptedError:
            continue
        if not r:
            continue
        try:
            buf = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        now = time.time()
        i = 0
        while i < len(buf):
            wd, mask, _, ln = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode()
            i += 16 + ln
            if mask & IN_Q_OVERFLOW:
                out.write(json.dumps({"t": now, "ev": "OVERFLOW"}) + "\n")
                continue
            d = wds.get(wd)
            if d is None:
                continue
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            for bit, ev in EV.items():
                if not mask & bit or ev is None:
                    continue
                if ev == "MODIFY":
                    if rel in modified:
                        continue
                    modified.add(rel)
                if ev in ("OPEN", "CLOSE_WRITE", "CLOSE_NOWRITE"):
                    modified.discard(rel)
                if ev == "CLOSE_NOWRITE" or (ev == "OPEN" and mask & IN_ISDIR):
                    continue  # readers and folder listings are noise here
                try:
                    size = os.path.getsize(p)
                except OSError:
                    size = None
                out.write(json.dumps({"t": now, "path": rel, "ev": ev, "size": size}) + "\n")
            if mask & 0x100 and mask & IN_ISDIR:
                watch(p)
        out.flush()
    out.close()


if __name__ == "__main__":
    main()
