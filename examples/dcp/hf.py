#!/usr/bin/python3
"""Two more torch 2.6 trainers with the file habits of popular ones, and
their check (run inside the trixie root, by hf.sh):

    hf.py hf    --save-dir DIR --log-dir LOG [--die K]   # 2 ranks, HF Trainer's checkpoint-N/
    hf.py plain --save-dir DIR --log-dir LOG [--die K] [--commit CMD]   # 1 process, torch.save(step-N.pt)
    hf.py check-hf STEP_DIR REF_JSON | check-plain FILE REF_JSON

hf: every --save-every steps, checkpoint-N/ as transformers' Trainer writes
it, with the safetensors package: model-0000K-of-0000N.safetensors (the
model split in 2 shards) and model.safetensors.index.json, optimizer.pt and
scheduler.pt (rank 0), rng_state_R.pth (every rank), then
trainer_state.json (rank 0, last, without waiting for the other ranks).
plain: torch.save of one dict {model, optimizer, step, rng} straight to
DIR/step-N.pt, in place (no temporary name).

Before each save LOG/ref/step-N.json gets the SHA-256 of every model and
optimizer tensor; the checks load the restored files with safetensors and
torch.load and compare. --die K SIGKILLs the job in its K-th save: hf after
the model shards and optimizer.pt, before trainer_state.json; plain with
1 MiB of step-N.pt written. plain --commit CMD: after each torch.save the
trainer says so (`ferry commit`: CMD plus --step N step-N.pt, waiting until
the step is durable), one line per call in LOG/commits.jsonl (rc, the time
the file was closed and the time the call returned).
"""

import argparse
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def model_and_opt(seed=7):
    import torch
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    return model, opt, sched


def ref(model, opt):
    return common.digest({"model": model.state_dict(), "optim": opt.state_dict()["state"]})


def die(why):
    print(f"SIGKILL of the job: {why}", flush=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def save_hf(d, step, model, opt, sched, rank, world, dying):
    import torch
    from safetensors.torch import save_file
    os.makedirs(d, exist_ok=True)
    if rank == 0:
        sd = {k: v.contiguous() for k, v in model.state_dict().items()}
        keys = sorted(sd)
        shards = [keys[:len(keys) // 2], keys[len(keys) // 2:]]
        index = {"metadata": {"total_size": sum(v.numel() * v.element_size() for v in sd.values())},
                 "weight_map": {}}
        for i, ks in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file({k: sd[k] for k in ks}, os.path.join(d, name), metadata={"format": "pt"})
            index["weight_map"].update({k: name for k in ks})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)
        torch.save(opt.state_dict(), os.path.join(d, "optimizer.pt"))
        torch.save(sched.state_dict(), os.path.join(d, "scheduler.pt"))
    torch.save({"python": None, "cpu": torch.get_rng_state()}, os.path.join(d, f"rng_state_{rank}.pth"))
    if dying:
        torch.distributed.barrier()  # every rank's RNG state is written
        if rank:
            torch.distributed.barrier()  # held here until rank 0 kills the job
        die("HF save: shards, optimizer and RNG states written, trainer_state.json not yet")
    if rank == 0:  # the main process, without a barrier: other ranks may still write
        with open(os.path.join(d, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step, "log_history": [], "world_size": world}, f, indent=2)


class Dying:
    """A file that SIGKILLs the job once 1 MiB is written to it."""

    def __init__(self, f):
        self.f, self.n = f, 0

    def write(self, b):
        n = self.f.write(b)
        self.n += len(memoryview(b).cast("B"))
        if self.n >= 1 << 20:
            self.f.flush()
            die("torch.save with 1 MiB written")
        return n

    def __getattr__(self, name):
        return getattr(self.f, name)


def train(kind, a):
    if kind == "hf":
        common.launch(2, sys.argv)
        rank, world = common.init()
    else:
        os.setpgrp()
        rank, world = 0, 1
    import torch
    model, opt, sched = model_and_opt()
    os.makedirs(os.path.join(a.log_dir, "ref"), exist_ok=True)
    saves = 0
    for step in range(1, a.steps + 1):
        x, y = common.batch(step, 0, 256)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % a.save_every:
            continue
        saves += 1
        dying = saves == a.die
        if kind == "hf":
            import torch.distributed as dist
            dist.barrier()  # as DDP's gradient all-reduce keeps the ranks in step
        if rank == 0:
            common.write_json(os.path.join(a.log_dir, "ref", f"step-{step}.json"), ref(model, opt))
        if kind == "hf":
            save_hf(os.path.join(a.save_dir, f"checkpoint-{step}"), step, model, opt, sched, rank, world, dying)
        else:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                     "rng": torch.get_rng_state()}
            with open(os.path.join(a.save_dir, f"step-{step}.pt"), "wb") as f:
                torch.save(state, Dying(f) if dying else f)
            if a.commit:
                commit(a, step)
    print(f"done at step {a.steps}", flush=True)
    sys.stdout.flush()
    os._exit(0)


def commit(a, step):
    """The plain torch.save form of docs/agent.md: ferry commit once the file is closed."""
    import shlex
    import subprocess
    import time
    closed = time.time()
    rc = subprocess.run(shlex.split(a.commit) + ["--step", str(step), f"step-{step}.pt"]).returncode
    with open(os.path.join(a.log_dir, "commits.jsonl"), "a") as f:
        f.write(json.dumps({"step": step, "rc": rc, "closed": closed, "durable": time.time()}) + "\n")


def check(kind, path, ref_path):
    import torch
    model, opt, _ = model_and_opt(seed=99)  # other weights: the load must replace them
    if kind == "check-hf":
        from safetensors.torch import load_file
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            index = json.load(f)
        sd = {}
        for name in sorted(set(index["weight_map"].values())):
            sd.update(load_file(os.path.join(path, name)))
        model.load_state_dict(sd)
        opt.load_state_dict(torch.load(os.path.join(path, "optimizer.pt")))
        step = json.load(open(os.path.join(path, "trainer_state.json")))["global_step"]
        for r in range(2):
            torch.load(os.path.join(path, f"rng_state_{r}.pth"))
    else:
        ck = torch.load(path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        step = ck["step"]
    got, want = ref(model, opt), json.load(open(ref_path))
    diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    if diff:
        sys.exit(f"FAIL: {path} (step {step}) differs from {ref_path} in {len(diff)} entries, first {diff[0]}")
    print(f"  {os.path.basename(path)}: loaded by torch, step {step}, {len(got)} model and optimizer tensors equal the trainer's")


def main():
    if sys.argv[1].startswith("check-"):
        return check(*sys.argv[1:4])
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["hf", "plain"])
    p.add_argument("--save-dir", required=True)
    p.add_argument("--log-dir", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--die", type=int, default=0)
    p.add_argument("--commit", default="", help="plain: ferry commit command prefix, see the module doc")
    a = p.parse_args()
    train(a.kind, a)


if __name__ == "__main__":
    main()
