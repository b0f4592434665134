"""Shared pieces of the torch 2.6 trainers in this folder: a launcher that
forks the ranks (torchrun needs libuv, which Debian's torch lacks), the
sharded model, and the reference hashes a step is checked against."""

import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import time


PORT_TAKEN = 75  # rank 0's exit code when its store's port was taken meanwhile


def launch(nprocs, argv):
    """Run this script once per rank (RANK, WORLD_SIZE, MASTER_PORT set) and
    exit with the first failure. The launcher leads a process group of its
    own, which the ranks share: a SIGKILL of the group (kill -KILL -- -PID of
    the launcher) ends the whole job and nothing else. A port another
    process took between the pick and rank 0's bind (a shared machine) means
    a new try on another port."""
    if "RANK" in os.environ:
        return
    if os.getpgrp() != os.getpid():
        os.setpgrp()
    for _ in range(5):
        rc = _run_ranks(nprocs, argv)
        if rc != PORT_TAKEN:
            sys.exit(rc)
        print("the store's port was taken; starting the ranks again on another", flush=True)
    sys.exit(rc)


def _run_ranks(nprocs, argv):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(nprocs):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable] + argv, env=env))
    rc = 0
    while procs:
        for p in list(procs):
            code = p.poll()
            if code is None:
                continue
            procs.remove(p)
            if code != 0 and rc == 0:
                rc = code
                for q in procs:
                    q.kill()
        time.sleep(0.05)
    return rc


def init():
    """The process group of this rank, over a TCPStore without libuv."""
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, rank == 0,
                              use_libuv=False, timeout=datetime.timedelta(seconds=120))
    except dist.DistNetworkError as e:
        if rank == 0 and "Address already in use" in str(e):
            os._exit(PORT_TAKEN)
        raise
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return rank, world


def build(dim, hidden, layers, world):
    """A small MLP whose parameters are DTensors sharded on dim 0 over a
    1-D CPU mesh (what FSDP2's fully_shard does, which needs a GPU stream in
    torch 2.6), and AdamW. The forward all-gathers each weight; its gradient
    is reduce-scattered back to the shards (Partial -> Shard), as FSDP."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(1234)  # the same full weights at every world size
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(dim if i == 0 else hidden, hidden if i < layers - 1 else dim))
    model = nn.ModuleList(mods)
    for m in model:
        for name, p in list(m.named_parameters()):
            setattr(m, name, nn.Parameter(distribute_tensor(p.data, mesh, [Shard(0)])))

    def gathered(p):
        return p.redistribute(mesh, [Replicate()]).to_local(grad_placements=[Partial()])

    def forward(x):
        for i, m in enumerate(model):
            x = torch.nn.functional.linear(x, gathered(m.weight), gathered(m.bias))
            if i < len(model) - 1:
                x = torch.tanh(x)
        return x

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return model, opt, forward


def batch(step, rank, dim, size=16):
    """Deterministic data: a function of (step, rank) only."""
    import torch
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(size, dim, generator=g)
    return x, torch.sin(x * 1.5)


def flat(sd, prefix=""):
    """(key, value) pairs of a nested state dict, in a stable order."""
    if isinstance(sd, dict):
        for k in sorted(sd, key=str):
            yield from flat(sd[k], f"{prefix}{k}/")
    elif isinstance(sd, (list, tuple)):
        for i, v in enumerate(sd):
            yield from flat(v, f"{prefix}{i}/")
    else:
        yield prefix.rstrip("/"), sd


def digest(state):
    """{key: sha256 of the full tensor (dtype, shape, bytes) or repr} of a
    state dict whose DTensors are gathered (a collective: every rank calls
    it with the same keys)."""
    import torch
    from torch.distributed.tensor import DTensor
    out = {}
    for k, v in flat(state):
        if isinstance(v, DTensor):
            v = v.full_tensor()
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            out[k] = h.hexdigest()
        else:
            out[k] = repr(v)
    return out


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
