#!/usr/bin/python3
"""Assertions for scenario.sh, run with Debian's /usr/bin/python3 (torch).

    check.py progress DIR RANKS
        print "<done> <writing>": the lowest step every rank's latest link
        names (0 if some rank has none), and the lowest step above it with a
        checkpoint file for every rank that not every link names yet (0 if
        none): a save in progress, as seen from outside the job.
    check.py half-written DIR STEP RANKS
        exit 0 if some rank's file of STEP fails torch.load (the kill landed
        mid-write), 1 if they all load.
    check.py losses REF_LOG_DIR RUN_LOG_DIR FIRST LAST RANKS [--partial]
        every (rank, step) in FIRST..LAST of the run has exactly the
        reference's loss bits; --partial accepts a run that stops early (a
        killed run, whose last line may be cut).
    check.py hashes REF_LOG_DIR RUN_LOG_DIR RANKS
        final weights (and optimizer state) hashes are equal.
    check.py same-content REF_DIR DIR FILE...
        each FILE loads from both folders with equal contents: tensors equal
        bit for bit, everything else equal. (The bytes of two saves of equal
        state can differ in pickle memo details, so this compares loaded
        contents, not files.)
    check.py steps DIR MANIFEST_JSON STEP [DIR MANIFEST_JSON STEP ...]
        restored committed steps: every file in the manifest has its size,
        loads with torch.load and holds data.step == STEP; every latest link
        names a file of this step.
"""

import json
import os
import re
import sys
import zipfile

STEP_FILE = re.compile(r"^ep(\d+)-ba(\d+)-rank(\d+)\.pt$")


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def link_step(d, rank):
    try:
        m = STEP_FILE.match(os.readlink(os.path.join(d, f"latest-rank{rank}.pt")))
    except OSError:
        return 0
    return int(m.group(2)) if m else 0


def progress(d, ranks):
    done = min(link_step(d, r) for r in range(ranks))
    files = {}
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        names = []
    for n in names:
        m = STEP_FILE.match(n)
        if m and os.path.isfile(os.path.join(d, n)) and os.path.getsize(os.path.join(d, n)) > 0:
            files.setdefault(int(m.group(2)), set()).add(int(m.group(3)))
    writing = [s for s, rs in files.items() if s > done and len(rs) == ranks
               and not all(link_step(d, r) >= s for r in range(ranks))]
    print(done, min(writing) if writing else 0)


def half_written(d, step, ranks):
    import torch
    broken = []
    for r in range(ranks):
        [name] = [n for n in os.listdir(d) if (m := STEP_FILE.match(n)) and int(m.group(2)) == step
                  and int(m.group(3)) == r]
        path = os.path.join(d, name)
        try:
            torch.load(path)
            print(f"  {name}: {os.path.getsize(path)} bytes, loads (this rank had finished)")
        except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
            print(f"  {name}: {os.path.getsize(path)} bytes, torch.load fails: {str(e).splitlines()[0][:80]}")
            broken.append(name)
    sys.exit(0 if broken else 1)


def read_log(d, rank, partial):
    out = {}
    with open(os.path.join(d, f"loss-rank{rank}.jsonl")) as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if partial and i == len(lines) - 1:
                break  # the kill cut the last line
            raise
        if rec["step"] in out:
            fail(f"{d} rank {rank}: step {rec['step']} logged twice")
        out[rec["step"]] = rec["loss_hex"]
    return out


def losses(ref, run, first, last, ranks, partial):
    compared = 0
    for r in range(ranks):
        want, got = read_log(ref, r, False), read_log(run, r, partial)
        steps = sorted(got)
        expect = list(range(first, last + 1))
        if partial:
            expect = expect[:len(steps)]
        if steps != expect:
            fail(f"rank {r}: {run} logged steps {steps[:3]}..{steps[-3:]}, want {first}..{last}")
        for s in steps:
            if got[s] != want.get(s):
                fail(f"rank {r} step {s}: loss {float.fromhex(got[s])!r} ({got[s]}) "
                     f"!= reference {float.fromhex(want[s])!r} ({want[s]})")
            compared += 1
    print(f"  {compared} per-step losses identical to the bit (steps {first}..{last if not partial else 'kill'}, {ranks} ranks)")


def hashes(ref, run, ranks):
    for r in range(ranks):
        with open(os.path.join(ref, f"final-rank{r}.json")) as f:
            want = json.load(f)
        with open(os.path.join(run, f"final-rank{r}.json")) as f:
            got = json.load(f)
        for k in ("step", "weights_sha256", "optimizer_sha256"):
            if got[k] != want[k]:
                fail(f"rank {r}: {k} {got[k]} != reference {want[k]}")
        print(f"  rank {r}: step {got['step']}, weights sha256 {got['weights_sha256']}, "
              f"optimizer sha256 {got['optimizer_sha256'][:16]}... identical")


def step(d, manifest_path, want):
    import torch
    with open(manifest_path) as f:
        m = json.load(f)
    if m["step"] != want:
        fail(f"manifest is for step {m['step']}, want {want}")
    names = set()
    for fe in m["files"]:
        path = os.path.join(d, fe["path"])
        size = os.path.getsize(path)
        if size != fe["size"]:
            fail(f"step {want}: {fe['path']} is {size} bytes, manifest says {fe['size']}")
        ck = torch.load(path)
        if ck["data"]["step"] != want:
            fail(f"step {want}: {fe['path']} holds step {ck['data']['step']}")
        names.add(fe["path"])
        print(f"  step {want}: {fe['path']}: {size} bytes = manifest, torch.load ok, data.step {want}")
    for link in m.get("symlinks", []):
        target = os.readlink(os.path.join(d, link["path"]))
        if target not in names:
            fail(f"step {want}: {link['path']} -> {target}, not a file of this step")
        print(f"  step {want}: {link['path']} -> {target}")


def diff_content(x, y, path):
    """The first difference between two loaded checkpoints, or None."""
    import torch
    if torch.is_tensor(x) or torch.is_tensor(y):
        if not (torch.is_tensor(x) and torch.is_tensor(y)) or x.dtype != y.dtype or x.shape != y.shape:
            return f"{path}: tensor type or shape differs"
        return None if tensor_bytes(x) == tensor_bytes(y) else f"{path}: tensor values differ"
    if type(x) is not type(y):
        return f"{path}: {type(x).__name__} vs {type(y).__name__}"
    if isinstance(x, dict):
        if list(x) != list(y):
            return f"{path}: keys differ"
        items = [(x[k], y[k], f"{path}/{k}") for k in x]
    elif isinstance(x, (list, tuple)):
        if len(x) != len(y):
            return f"{path}: lengths differ"
        items = [(p, q, f"{path}[{i}]") for i, (p, q) in enumerate(zip(x, y))]
    else:
        return None if x == y else f"{path}: {x!r} vs {y!r}"
    for p, q, sub in items:
        d = diff_content(p, q, sub)
        if d:
            return d
    return None


def tensor_bytes(t):
    return t.detach().cpu().contiguous().numpy().tobytes()


def same_content(ref, d, names):
    import torch
    for n in names:
        why = diff_content(torch.load(os.path.join(ref, n)), torch.load(os.path.join(d, n)), "")
        if why:
            fail(f"{d}/{n} differs from {ref}/{n}: {why}")
    print(f"  {len(names)} checkpoint files hold exactly the reference's contents (every tensor bit for bit)")


def main(a):
    if a[0] == "progress":
        progress(a[1], int(a[2]))
    elif a[0] == "half-written":
        half_written(a[1], int(a[2]), int(a[3]))
    elif a[0] == "losses":
        losses(a[1], a[2], int(a[3]), int(a[4]), int(a[5]), "--partial" in a[6:])
    elif a[0] == "hashes":
        hashes(a[1], a[2], int(a[3]))
    elif a[0] == "same-content":
        same_content(a[1], a[2], a[3:])
    elif a[0] == "steps":
        for i in range(1, len(a), 3):
            step(a[i], a[i + 1], int(a[i + 2]))
    else:
        fail(f"unknown check {a[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
