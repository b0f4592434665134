#!/usr/bin/python3
"""A torch 2.6 trainer that saves the way torchtitan does: parameters
sharded as DTensors (Shard(0)) on a CPU gloo mesh, AdamW, and every
--save-every steps `torch.distributed.checkpoint.save` of
`get_state_dict(model, optim)` into SAVE_DIR/step-N/ (or `dcp.async_save`
with --async). Run inside the trixie root (scenario.sh).

    train.py --nprocs 4 --save-dir DIR --log-dir LOG [--resume DIR] [--async]
             [--die K:POINT] [--commit "FERRY commit --watch DIR ..."]

Before each save, rank 0 writes LOG/ref/step-N.json: the SHA-256 of every
gathered model and optimizer tensor (the reference a restored step must
equal), and once dcp.save has returned on every rank (async: its future
resolved) a line in LOG/saves.jsonl with the wall-clock time at which the
last rank's returned. LOG/final.json
holds the last step's hashes, LOG/loss.jsonl every step's loss bits.

--commit CMD: after each save, rank 0 says the step is complete the way
docs/agent.md shows (`ferry commit`, CMD plus --step N step-N): with
dcp.save once it returned on every rank, waiting until the step is durable
(its saves.jsonl line then holds commit_rc and durable, the time the call
returned); with dcp.async_save from the future's done callback, with
--no-wait (its rc goes to LOG/commits.jsonl).

--die K:POINT SIGKILLs the whole job (its process group) at POINT of this
run's K-th save, from inside the save, so that each moment is hit exactly:
  open          rank 1 has written 1 MiB of its shard; no shard is closed
  between       rank 0's shard is closed; ranks 1-3 hold theirs open (delayed)
  shards        every shard is closed; the coordinator has not begun .metadata
  metadata-tmp  .metadata.tmp is written, not yet renamed
  metadata      .metadata is renamed in place; ranks not yet returned
  after         dcp.save returned everywhere; 0.3 s into the next steps
"""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

POINTS = ("open", "between", "shards", "metadata-tmp", "metadata", "after")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=4)
    p.add_argument("--save-dir", required=True)
    p.add_argument("--log-dir", required=True)
    p.add_argument("--resume", help="resume from the newest DIR/step-N with a .metadata")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--async", dest="async_save", action="store_true")
    p.add_argument("--die", default="", help="K:POINT, see the module doc")
    p.add_argument("--pause", type=float, default=0, help="seconds of sleep per save interval (timing runs)")
    p.add_argument("--no-ref", action="store_true", help="skip the reference hashes (timing runs)")
    p.add_argument("--commit", default="", help="ferry commit command prefix, see the module doc")
    a = p.parse_args()
    if a.die:
        k, _, point = a.die.partition(":")
        if point not in POINTS:
            p.error(f"--die {a.die}: POINT must be one of {', '.join(POINTS)}")
        a.die = (int(k), point)
    return a


def die(why):
    print(f"rank {os.environ.get('RANK')}: SIGKILL of the job: {why}", flush=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def hooked_writer(path, rank, die_now):
    """A FileSystemWriter whose file system calls die_now(point) at the
    moments --die names; without --die it is the stock writer."""
    from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter

    class Stream:
        def __init__(self, f):
            self._f, self._n = f, 0

        def write(self, b):
            n = self._f.write(b)
            self._n += len(memoryview(b).cast("B"))
            if self._n >= 1 << 20 and rank == 1:
                self._f.flush()
                die_now("open")
            return n

        def __getattr__(self, name):
            return getattr(self._f, name)

    class HookFS(FileSystem):
        def create_stream(self, path, mode):
            outer = super().create_stream(path, mode)

            class CM:
                def __enter__(cm):
                    f = outer.__enter__()
                    if str(path).endswith(".distcp"):
                        if rank != 0:
                            die_now("between:delay")
                        return Stream(f)
                    return f

                def __exit__(cm, *exc):
                    r = outer.__exit__(*exc)
                    if str(path).endswith(".distcp") and rank == 0:
                        die_now("between")
                    return r
            return CM()

        def rename(self, path, new_path):
            die_now("metadata-tmp")
            super().rename(path, new_path)
            die_now("metadata")

    class Writer(FileSystemWriter):
        def finish(self, metadata, results):
            die_now("shards")
            return super().finish(metadata, results)

    w = Writer(path, thread_count=1)
    w.fs = HookFS()
    return w


def newest_complete(d):
    best = None
    for n in os.listdir(d) if d and os.path.isdir(d) else []:
        m = re.fullmatch(r"step-(\d+)", n)
        if m and os.path.isfile(os.path.join(d, n, ".metadata")):
            best = max(best or 0, int(m.group(1)))
    return best


def main():
    a = parse()
    common.launch(a.nprocs, sys.argv)
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    rank, world = common.init()
    model, opt, forward = common.build(a.dim, a.hidden, a.layers, world)
    os.makedirs(os.path.join(a.log_dir, "ref"), exist_ok=True)
    os.makedirs(a.save_dir, exist_ok=True)

    start = 0
    resumed = newest_complete(a.resume)
    if resumed:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "train": {"step": 0}}
        dcp.load(state, checkpoint_id=os.path.join(a.resume, f"step-{resumed}"))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = state["train"]["step"]
        assert start == resumed, (start, resumed)
        if rank == 0:
            print(f"resumed from step {start} ({a.resume})", flush=True)

    saves = 0
    current = {"k": 0}
    die_k, die_point = a.die if a.die else (0, "")

    def die_now(point):
        if current["k"] != die_k:
            return
        if point == "between:delay":
            if die_point == "between":
                time.sleep(3)  # hold ranks 1-3's shards open while rank 0 closes its own
            return
        if point == die_point:
            die(f"save {die_k} at {point}")

    async_pg = dist.new_group(backend="gloo") if a.async_save else None
    pending = None  # (future, step)
    log = open(os.path.join(a.log_dir, "loss.jsonl"), "a") if rank == 0 else None
    saves_log = open(os.path.join(a.log_dir, "saves.jsonl"), "a") if rank == 0 else None

    done_at = {}  # step -> when dcp.save returned (async: the future resolved) on this rank
    commit = shlex.split(a.commit)
    commits_done = set()  # steps whose --no-wait call returned (async)
    commits_log = open(os.path.join(a.log_dir, "commits.jsonl"), "a") if rank == 0 and commit else None

    def commit_now(step):
        # async_save's future on rank 0 resolves once .metadata is written,
        # which DCP does only after every rank's shards are: the files are
        # all closed. --no-wait keeps the training loop free.
        rc = subprocess.run(commit + ["--no-wait", "--step", str(step), f"step-{step}"]).returncode
        commits_log.write(json.dumps({"step": step, "rc": rc, "at": time.time()}) + "\n")
        commits_log.flush()
        commits_done.add(step)

    def saved(step, t0, k):
        # The latest of the ranks' return times: when the save had returned
        # on every rank (a collective, so every rank is past its save).
        for _ in range(1000):  # result() can return before the done callback ran
            if step in done_at:
                break
            time.sleep(0.001)
        t = torch.tensor([done_at.pop(step)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            rec = {"step": step, "returned": float(t), "began": t0, "mode": "async" if a.async_save else "sync"}
            if commit and not a.async_save:  # the waiting form, docs/agent.md
                rec["commit_rc"] = subprocess.run(commit + ["--step", str(step), f"step-{step}"]).returncode
                rec["durable"] = time.time()
            saves_log.write(json.dumps(rec) + "\n")
            saves_log.flush()
        if die_point == "after" and k == die_k:
            current["after"] = time.time() + 0.3

    for step in range(start + 1, a.steps + 1):
        x, y = common.batch(step, rank, a.dim)
        loss = ((forward(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if a.pause:
            time.sleep(a.pause / a.save_every)
        lsum = loss.detach().clone()
        dist.all_reduce(lsum)  # the mean over ranks' losses, for the log
        if rank == 0:
            log.write(json.dumps({"step": step, "loss_hex": float(lsum).hex()}) + "\n")
            log.flush()
        if time.time() >= current.get("after", 1e18):
            die(f"save {die_k}, after it returned")
        if step % a.save_every:
            continue
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "train": {"step": step}}
        if not a.no_ref:
            ref = common.digest({"model": msd, "optim": osd})
            if rank == 0:
                common.write_json(os.path.join(a.log_dir, "ref", f"step-{step}.json"), ref)
        saves += 1
        current["k"] = saves
        path = os.path.join(a.save_dir, f"step-{step}")
        t0 = time.time()
        if a.async_save:
            if pending:
                pending[0].result()  # one save in flight, as torchtitan
                saved(*pending[1:])
            # async_save's staging does not copy CPU tensors: snapshot them,
            # or the next optimizer step tears this checkpoint.
            snap = {"model": {k: v.clone() for k, v in msd.items()},
                    "optim": _clone(osd), "train": {"step": step}}
            fut = dcp.async_save(snap, storage_writer=hooked_writer(path, rank, die_now),
                                 process_group=async_pg)
            fut.add_done_callback(lambda _, s=step: done_at.__setitem__(s, time.time()))
            if commit and rank == 0:
                fut.add_done_callback(lambda _, s=step: commit_now(s))
            pending = (fut, step, t0, saves)
        else:
            dcp.save(state, storage_writer=hooked_writer(path, rank, die_now))
            done_at[step] = time.time()
            saved(step, t0, saves)
    if pending:
        pending[0].result()
        saved(*pending[1:])
    if commits_log:  # result() can return before the done callbacks ran
        for _ in range(600):
            if len(commits_done) == saves:
                break
            time.sleep(0.1)
    msd, osd = get_state_dict(model, opt)
    final = common.digest({"model": msd, "optim": osd})
    if rank == 0:
        common.write_json(os.path.join(a.log_dir, "final.json"), {"step": a.steps, "hashes": final})
        print(f"done at step {a.steps}", flush=True)
    dist.barrier()
    os._exit(0)  # destroy_process_group() can hang at exit in 2.6


def _clone(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clone(v) for v in x]
    return x


if __name__ == "__main__":
    main()
