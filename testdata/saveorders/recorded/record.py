#!/usr/bin/python3
"""The saves record.sh records under strace, run inside the trixie root
(torch 2.6, python3-torch-ignite 0.5):

    record.py dcp-save|dcp-async-save|torch-save|ignite DIR LOG

DIR is the watch dir the saves write into; LOG a folder outside it. Each
process opens LOG/rank-R once, and each rank opens LOG/save-N-rank-R
before its save of step N: convert.py reads these opens (in the strace
output, not their contents) to name each process's rank and to cut the
recording into saves.

  dcp-save        2 ranks (gloo, one process each) torch.distributed.checkpoint
                  .save of a small model and its AdamW state into DIR/step-100
                  (FileSystemWriter at its defaults)
  dcp-async-save  the same with dcp.async_save, the future waited on
  torch-save      torch.save(state, DIR/checkpoint.pt), once
  ignite          ignite ModelCheckpoint(DIR, n_saved=2) (DiskSaver, atomic)
                  saving {"model", "optimizer"} (checkpoint_N.pt) at iterations
                  100, 200 and 300
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def mark(log, name):
    open(os.path.join(log, name), "w").close()


def state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    return model, opt


def dcp_rank(rank, world, port, mode, root, log):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import datetime

    # A TCPStore without libuv, which Debian's torch lacks (as examples/dcp/common.py).
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, use_libuv=False,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    mark(log, f"rank-{rank}")
    model, opt = state()
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    dist.barrier()
    mark(log, f"save-100-rank-{rank}")
    path = os.path.join(root, "step-100")
    if mode == "dcp-async-save":
        dcp.async_save(sd, checkpoint_id=path).result()
    else:
        dcp.save(sd, checkpoint_id=path)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ignite(root, log):
    from ignite.engine import Engine, Events
    from ignite.handlers import ModelCheckpoint

    model, opt = state()
    engine = Engine(lambda e, b: None)
    handler = ModelCheckpoint(root, filename_prefix="", n_saved=2, require_empty=False)
    mark(log, "rank-0")

    @engine.on(Events.ITERATION_COMPLETED(every=100))
    def save(e):
        mark(log, f"save-{e.state.iteration}-rank-0")
        handler(e, {"model": model, "optimizer": opt})

    engine.run(range(300), max_epochs=1)


def main():
    mode, root, log = sys.argv[1:4]
    if mode in ("dcp-save", "dcp-async-save"):
        mp.spawn(dcp_rank, args=(2, free_port(), mode, root, log), nprocs=2, join=True)
    elif mode == "torch-save":
        mark(log, "rank-0")
        model, opt = state()
        mark(log, "save-100-rank-0")
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, os.path.join(root, "checkpoint.pt"))
    elif mode == "ignite":
        ignite(root, log)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
