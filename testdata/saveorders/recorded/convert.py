#!/usr/bin/env python3
"""Convert `strace -f` output of a recorded save (record.sh) into the
trace op vocabulary (testdata/saveorders/FORMAT.md), one save after another:

    convert.py --watch DIR --log LOG --name NAME [--about TEXT] STRACE > NAME.ops

Only operations on paths under DIR count, relative to it. Each process is
the rank whose LOG/rank-R it opened; its threads other than the main one
are that rank's background writers (r0/bg, then r0/bg2 ...). A rank's
opening of LOG/save-N-rank-R starts its part of save N: the output has a
`save N` line, then the operations of that save in the order strace saw
them (each actor's order is its own; between actors the order is one
interleaving). Operations:

  mkdir P          mkdir(2) that made P or found it there (mkdir -p)
  write P SIZE     a file opened for writing (O_CREAT or O_TRUNC), written
                   and closed with no other operation of the actor between
  create P / append P SIZE / close P
                   the same where the actor did something else meanwhile
  rename A B, remove P, rmtree P (rmdir), symlink T L

Failed calls are left out (a remove of a file not there is no operation),
and so are reads, stats and chmods.
"""

import argparse
import os
import re
import sys

LINE = re.compile(r"^(\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(?:\s+(\w+))?")
WRITE_FLAGS = ("O_WRONLY", "O_RDWR")


def split_args(s):
    """Split a syscall's argument list at top-level commas."""
    out, cur, depth, quote, esc = [], [], 0, False, False
    for ch in s:
        if quote:
            cur.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


def unquote(s):
    s = s.rstrip(".")  # strace marks a string cut at -s with ...
    if not (s.startswith('"') and s.endswith('"')):
        return None
    return s[1:-1].encode().decode("unicode_escape")


class Converter:
    def __init__(self, watch, log):
        self.watch, self.log = watch.rstrip("/"), log.rstrip("/")
        self.tgid = {}  # tid -> process
        self.rank = {}  # process -> rank
        self.threads = {}  # process -> its other threads doing ops, in order
        self.fds = {}  # process -> {fd: path or ("w", op)}
        self.save = {}  # tid -> step
        self.saves = []  # step, in the order first seen
        self.ops = {}  # step -> [op]
        self.last = {}  # actor -> its last op
        self.pending = {}

    def rel(self, path, dirfd, tid):
        if path is None:
            return None
        if not path.startswith("/"):
            base = self.fds.get(self.proc(tid), {}).get(dirfd) if dirfd not in (None, "AT_FDCWD") else None
            if not isinstance(base, str):
                return None
            path = os.path.join(base, path)
        path = os.path.normpath(path)
        if path == self.watch or not path.startswith(self.watch + "/"):
            return None
        return path[len(self.watch) + 1:]

    def proc(self, tid):
        return self.tgid.setdefault(tid, tid)

    def actor(self, tid):
        p = self.proc(tid)
        r = self.rank.get(p, "?")
        if tid == p:
            return f"r{r}"
        th = self.threads.setdefault(p, [])
        if tid not in th:
            th.append(tid)
        i = th.index(tid)
        return f"r{r}/bg" + (str(i + 1) if i else "")

    def emit(self, tid, kind, *args, size=None):
        step = self.save.get(tid, self.save.get(self.proc(tid), self.saves[-1] if self.saves else 0))
        if step not in self.ops:
            self.ops[step] = []
            self.saves.append(step)
        op = {"who": self.actor(tid), "kind": kind, "args": list(args), "size": size}
        self.ops[step].append(op)
        self.last[op["who"]] = op
        return op

    def line(self, raw):
        m = LINE.match(raw)
        if not m:
            return
        tid, rest = int(m.group(1)), m.group(2)
        if rest.endswith("<unfinished ...>"):
            self.pending[tid] = rest[: -len("<unfinished ...>")].rstrip()
            return
        r = re.match(r"^<\.\.\. \w+ resumed>(.*)$", rest)
        if r:
            rest = self.pending.pop(tid, "") + r.group(1)
        c = CALL.match(rest)
        if c:
            self.call(tid, c.group(1), split_args(c.group(2)), int(c.group(3)) if c.group(3) != "?" else None, c.group(4))

    def call(self, tid, name, a, ret, err):
        if name in ("clone", "clone3", "fork", "vfork"):
            if ret and ret > 0:
                flags = " ".join(a)
                self.tgid[ret] = self.proc(tid) if "CLONE_THREAD" in flags else ret
                if tid in self.save:  # a thread or child works on its parent's save
                    self.save[ret] = self.save[tid]
                if ret not in self.fds:
                    self.fds[ret] = dict(self.fds.get(self.proc(tid), {}))
            return
        handler = getattr(self, "on_" + name, None)
        if handler:
            handler(tid, a, ret, err)

    def on_openat(self, tid, a, ret, err, dirfd=True):
        path = unquote(a[1] if dirfd else a[0])
        flags = a[2] if dirfd else a[1]
        if ret is None or ret < 0 or path is None:
            return
        self.marker(tid, path)
        rel = self.rel(path, a[0] if dirfd else None, tid)
        fds = self.fds.setdefault(self.proc(tid), {})
        if rel is not None and any(f in flags for f in WRITE_FLAGS) and ("O_CREAT" in flags or "O_TRUNC" in flags):
            fds[ret] = ("w", self.emit(tid, "create", rel, size=0))
        else:
            fds[ret] = os.path.normpath(path) if "O_DIRECTORY" in flags else None

    def on_open(self, tid, a, ret, err):
        self.on_openat(tid, a, ret, err, dirfd=False)

    def marker(self, tid, path):
        if os.path.dirname(path) != self.log:
            return
        base = os.path.basename(path)
        m = re.match(r"^rank-(\d+)$", base)
        if m:
            self.rank[self.proc(tid)] = int(m.group(1))
        m = re.match(r"^save-(\d+)-rank-\d+$", base)
        if m:
            self.save[tid] = int(m.group(1))
            for t, p in self.tgid.items():  # the rank's threads follow it
                if p == self.proc(tid):
                    self.save[t] = int(m.group(1))

    def on_write(self, tid, a, ret, err):
        ent = self.fds.get(self.proc(tid), {}).get(int(a[0]))
        if not isinstance(ent, tuple) or ret is None or ret < 0:
            return
        op = ent[1]
        last = self.last.get(self.actor(tid))
        if last is op or (last and last["kind"] == "append" and last["args"][0] == op["args"][0] and last.get("file") is op):
            last["size"] += ret
        else:
            self.emit(tid, "append", op["args"][0], size=ret)["file"] = op

    on_writev = on_write
    on_pwrite64 = on_write

    def on_close(self, tid, a, ret, err):
        fds = self.fds.get(self.proc(tid), {})
        ent = fds.pop(int(a[0]), None)
        if not isinstance(ent, tuple) or ret is None or ret < 0:
            return
        op = ent[1]
        if self.last.get(self.actor(tid)) is op and op["who"] == self.actor(tid):
            op["kind"] = "write"
        else:
            self.emit(tid, "close", op["args"][0])

    def on_mkdir(self, tid, a, ret, err, dirfd=False):
        rel = self.rel(unquote(a[1] if dirfd else a[0]), a[0] if dirfd else None, tid)
        if rel is not None and (ret == 0 or err == "EEXIST"):
            self.emit(tid, "mkdir", rel)

    def on_mkdirat(self, tid, a, ret, err):
        self.on_mkdir(tid, a, ret, err, dirfd=True)

    def on_rename(self, tid, a, ret, err, at=False):
        old = self.rel(unquote(a[1] if at else a[0]), a[0] if at else None, tid)
        new = self.rel(unquote(a[3] if at else a[1]), a[2] if at else None, tid)
        if ret == 0 and (old or new):
            self.emit(tid, "rename", old or "(outside)", new or "(outside)")

    def on_renameat(self, tid, a, ret, err):
        self.on_rename(tid, a, ret, err, at=True)

    on_renameat2 = on_renameat

    def on_unlink(self, tid, a, ret, err, at=False):
        rel = self.rel(unquote(a[1] if at else a[0]), a[0] if at else None, tid)
        if rel is not None and ret == 0:
            self.emit(tid, "rmtree" if at and "AT_REMOVEDIR" in a[2] else "remove", rel)

    def on_unlinkat(self, tid, a, ret, err):
        self.on_unlink(tid, a, ret, err, at=True)

    def on_rmdir(self, tid, a, ret, err):
        rel = self.rel(unquote(a[0]), None, tid)
        if rel is not None and ret == 0:
            self.emit(tid, "rmtree", rel)

    def on_symlink(self, tid, a, ret, err, at=False):
        link = self.rel(unquote(a[2] if at else a[1]), a[1] if at else None, tid)
        if link is not None and ret == 0:
            self.emit(tid, "symlink", unquote(a[0]), link)

    def on_symlinkat(self, tid, a, ret, err):
        self.on_symlink(tid, a, ret, err, at=True)

    def output(self, out, name, about):
        out.write(f"# {name}: recorded by record.sh ({about}); convert.py wrote this file.\n")
        out.write("# Sizes are as recorded; the comparison with the trace ignores them.\n")
        for step in self.saves:
            out.write(f"save {step}\n")
            for op in self.ops[step]:
                who, kind, args = op["who"], op["kind"], " ".join(op["args"])
                if kind == "create":
                    out.write(f"{who} create {args}\n")
                    if op["size"]:
                        out.write(f"{who} append {args} {op['size']}\n")
                elif kind in ("write", "append"):
                    out.write(f"{who} {kind} {args} {op['size']}\n")
                else:
                    out.write(f"{who} {kind} {args}\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--watch", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--about", default="")
    p.add_argument("strace")
    o = p.parse_args()
    c = Converter(o.watch, o.log)
    with open(o.strace, errors="replace") as f:
        for raw in f:
            c.line(raw.rstrip("\n"))
    c.output(sys.stdout, o.name, o.about)


if __name__ == "__main__":
    main()
