#!/usr/bin/python3
"""A small, deterministic data-parallel training job that checkpoints the way
MosaicML Composer does, for ferry's end-to-end resume scenario.

Two processes train an MLP with DistributedDataParallel on the gloo backend
(CPU only), with Adam, a learning-rate schedule, dropout and input noise
drawn from torch, numpy and Python's random, so that every piece of state a
real job has to carry across a restart is exercised. Every --save-every
steps each rank torch.saves its own checkpoint IN PLACE at the final name

    <save-dir>/ep{E}-ba{B}-rank{R}.pt

(model, optimizer, scheduler, all RNG states, data position) and then
repoints the symlink latest-rank{R}.pt at it, as Composer does: the link is
removed and recreated, and torch.save writes straight to the final path, so
a half-written file is visible while it is written.

--resume DIR loads DIR/latest-rank{R}.pt and continues from the saved step;
an empty or missing DIR starts from scratch (what `ferry restore
--allow-empty` leaves on a first run). Resumed runs are bit-exact: the
per-step losses and final weights equal those of an uninterrupted run.

Launch:
    /usr/bin/python3 train.py --save-dir CKPT ...          # spawns 2 ranks
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --redirects 1 --tee 1 train.py ...
                                                            # torchrun style
(Debian's torchrun 1.13 on Python 3.11 fails with its default --redirects 0:
see README.md.)
Outputs, in --log-dir: loss-rank{R}.jsonl (one JSON line per step: step,
loss as repr and float.hex) and final-rank{R}.json (SHA-256 of the final
model state_dict bytes and of the optimizer state).

Needs Debian's python3-torch (PyTorch 1.13): /usr/bin/python3, not a
virtualenv's python3.
"""

import argparse
import hashlib
import json
import math
import os
import random
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The job's fixed shape. Only the run length, checkpoint cadence and
# checkpoint size are flags: everything that affects the numbers is pinned.
# Small, because Debian's PyTorch runs on the reference BLAS: a 512-wide
# layer made a step cost ~0.1 s of CPU.
N_SAMPLES = 4096
IN_DIM = 64
HIDDEN = 128
BATCH_PER_RANK = 32


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--save-dir", required=True, help="checkpoint folder (ep{E}-ba{B}-rank{R}.pt, latest-rank{R}.pt)")
    p.add_argument("--log-dir", required=True, help="where loss-rank{R}.jsonl and final-rank{R}.json go")
    p.add_argument("--steps", type=int, default=200, help="train until this global step")
    p.add_argument("--save-every", type=int, default=25, help="checkpoint every K steps")
    p.add_argument("--resume", metavar="DIR", help="resume from DIR/latest-rank{R}.pt if it exists")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--nprocs", type=int, default=2, help="ranks to spawn when not launched by torchrun")
    p.add_argument("--pad-mib", type=float, default=8.0,
                   help="extra MiB of deterministic padding per checkpoint, so that a save takes a noticeable moment")
    p.add_argument("--slow-save", type=float, default=0.0, metavar="MIB_PER_S",
                   help="throttle checkpoint writes to this rate (still in place, still torch.save) to widen the "
                        "window in which a kill lands mid-write; 0 = full speed")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------
# Data: a seeded synthetic regression set, sharded like DistributedSampler.


def make_dataset(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_SAMPLES, IN_DIM, generator=g)
    w = torch.randn(IN_DIM, 1, generator=g) / math.sqrt(IN_DIM)
    y = torch.sin(x @ w * 3.0) + 0.1 * torch.randn(N_SAMPLES, 1, generator=g)
    return x, y


def batches_per_epoch(world):
    return N_SAMPLES // (BATCH_PER_RANK * world)


def epoch_indices(seed, epoch, rank, world):
    """This rank's sample order for an epoch: a permutation seeded by
    (seed, epoch), every world-th index, as DistributedSampler does."""
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    perm = torch.randperm(N_SAMPLES, generator=g)
    return perm[rank::world]


# ----------------------------------------------------------------------------
# Model, optimizer, schedule.


def make_model(seed):
    torch.manual_seed(seed)  # identical initial weights on every rank
    return nn.Sequential(
        nn.Linear(IN_DIM, HIDDEN), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, 1),
    )


def lr_lambda(step):
    """Linear warm-up over 20 steps, then exponential decay (a module-level
    function: LambdaLR's state_dict stores only its counters)."""
    if step < 20:
        return (step + 1) / 20
    return 0.98 ** ((step - 20) / 5)


# ----------------------------------------------------------------------------
# Checkpoints, the Composer way.


def ckpt_name(epoch, step, rank):
    return f"ep{epoch}-ba{step}-rank{rank}.pt"


def latest_name(rank):
    return f"latest-rank{rank}.pt"


class ThrottledFile:
    """A write-only file at the final path, written at a capped rate: the same
    in-place bytes torch.save would write, only slower, so an external kill
    can land in the middle. Unbuffered, so the size on disk grows as it goes."""

    CHUNK = 256 << 10

    def __init__(self, path, mib_per_s):
        self.f = open(path, "wb", buffering=0)
        self.rate = mib_per_s * (1 << 20)
        self.start = time.monotonic()
        self.written = 0

    def write(self, data):
        view = memoryview(data)
        for off in range(0, len(view), self.CHUNK):
            chunk = view[off:off + self.CHUNK]
            self.f.write(chunk)
            self.written += len(chunk)
            ahead = self.written / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                time.sleep(ahead)
        return len(view)

    def flush(self):
        pass

    def close(self):
        self.f.close()


def save_checkpoint(args, state, rank, step, epoch):
    path = os.path.join(args.save_dir, ckpt_name(epoch, step, rank))
    if args.slow_save > 0:
        f = ThrottledFile(path, args.slow_save)
        try:
            torch.save(state, f)
        finally:
            f.close()
    else:
        torch.save(state, path)  # in place at the final name
    # Composer repoints the link by removing and recreating it.
    link = os.path.join(args.save_dir, latest_name(rank))
    try:
        os.remove(link)
    except FileNotFoundError:
        pass
    os.symlink(os.path.basename(path), link)


def padding(seed, rank, step, mib):
    """Deterministic filler standing in for the bulk of a real checkpoint."""
    n = int(mib * (1 << 20)) // 4
    g = torch.Generator().manual_seed(seed + 7919 * rank + step)
    return torch.rand(n, generator=g)


# ----------------------------------------------------------------------------
# Hashes of the final state, compared across runs.


def tensor_bytes(t):
    return t.detach().cpu().contiguous().numpy().tobytes()


def hash_state_dict(sd):
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(str(sd[k].dtype).encode() + str(tuple(sd[k].shape)).encode())
        h.update(tensor_bytes(sd[k]))
    return h.hexdigest()


def hash_optimizer(opt):
    h = hashlib.sha256()
    sd = opt.state_dict()
    for pid in sorted(sd["state"]):
        for k in sorted(sd["state"][pid]):
            v = sd["state"][pid][k]
            h.update(f"{pid}.{k}".encode())
            h.update(tensor_bytes(v) if torch.is_tensor(v) else repr(v).encode())
    h.update(repr(sd["param_groups"]).encode())
    return h.hexdigest()


# ----------------------------------------------------------------------------
# One rank.


def train(rank, world, args):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    x_all, y_all = make_dataset(args.seed)
    model = DDP(make_model(args.seed))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.99), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    loss_fn = nn.MSELoss()

    # Per-rank streams for dropout (torch), input noise (numpy) and the
    # noise scale (Python's random): the state a restart has to carry.
    torch.manual_seed(args.seed * 100 + rank)
    np_rng = np.random.default_rng(args.seed * 100 + rank)
    py_rng = random.Random(args.seed * 100 + rank)

    step, epoch, pos = 0, 0, 0  # completed steps; next batch = (epoch, pos)
    resumed_from = None
    if args.resume:
        path = os.path.join(args.resume, latest_name(rank))
        if os.path.exists(path):
            ck = torch.load(path)
            model.module.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
            sched.load_state_dict(ck["scheduler"])
            torch.set_rng_state(ck["rng"]["torch"])
            np_rng.bit_generator.state = ck["rng"]["numpy"]
            py_rng.setstate(ck["rng"]["python"])
            step, epoch, pos = ck["data"]["step"], ck["data"]["epoch"], ck["data"]["batch_in_epoch"]
            resumed_from = os.path.realpath(path)
            print(f"rank {rank}: resumed from {resumed_from} at step {step}", flush=True)
        elif rank == 0:
            print(f"rank {rank}: nothing to resume in {args.resume}; starting from scratch", flush=True)

    os.makedirs(args.save_dir, exist_ok=True)
    os.makedirs(args.log_dir, exist_ok=True)
    log = open(os.path.join(args.log_dir, f"loss-rank{rank}.jsonl"), "a", buffering=1)
    bpe = batches_per_epoch(world)
    order = epoch_indices(args.seed, epoch, rank, world)
    model.train()
    while step < args.steps:
        idx = order[pos * BATCH_PER_RANK:(pos + 1) * BATCH_PER_RANK]
        x, y = x_all[idx], y_all[idx]
        scale = py_rng.uniform(0.0, 0.05)
        x = x + torch.from_numpy(np_rng.standard_normal(x.shape).astype(np.float32)) * scale

        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        pos += 1
        if pos == bpe:
            epoch, pos = epoch + 1, 0
            order = epoch_indices(args.seed, epoch, rank, world)

        v = loss.item()
        log.write(json.dumps({"step": step, "rank": rank, "loss": v, "loss_hex": v.hex(),
                              "lr": sched.get_last_lr()[0]}) + "\n")

        if step % args.save_every == 0:
            state = {
                "model": model.module.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "numpy": np_rng.bit_generator.state,
                        "python": py_rng.getstate()},
                "data": {"step": step, "epoch": epoch, "batch_in_epoch": pos,
                         "seed": args.seed, "world_size": world},
                "padding": padding(args.seed, rank, step, args.pad_mib),
            }
            t0 = time.monotonic()
            save_checkpoint(args, state, rank, step, epoch)
            print(f"rank {rank}: saved step {step} in {time.monotonic() - t0:.2f}s", flush=True)
    log.close()

    result = {"rank": rank, "step": step, "resumed_from": resumed_from,
              "weights_sha256": hash_state_dict(model.module.state_dict()),
              "optimizer_sha256": hash_optimizer(opt)}
    with open(os.path.join(args.log_dir, f"final-rank{rank}.json"), "w") as f:
        json.dump(result, f)
    print(f"rank {rank}: done at step {step}, weights sha256 {result['weights_sha256']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def spawned(rank, world, args):
    os.environ["RANK"] = str(rank)
    train(rank, world, args)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # stay on loopback
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    os.environ["WORLD_SIZE"] = str(args.nprocs)
    # fork, not spawn: the ranks inherit the imported torch instead of
    # importing it again (seconds on a small machine). Safe here because the
    # launcher has run no torch op, so no thread pool exists yet.
    torch.multiprocessing.start_processes(spawned, args=(args.nprocs, args), nprocs=args.nprocs,
                                          join=True, start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])
