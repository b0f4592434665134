"""Saves the real DCP steps under testdata/dcp-records with torch 2.6
(the Debian 13 root `make trixie` builds): ferry's reader of DCP's
.metadata and the agent's record check are tested on what torch writes,
not on what we remember it writes.

    scripts/in-trixie.sh python3 testdata/dcp-records/gen.py testdata/dcp-records

Each folder is one step as FileSystemWriter leaves it; want.json beside
them gives, per step, the files each .metadata should name and their sizes
as Python reads them back from the metadata itself.
"""
import json
import os
import pickle
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def state(rank, world, mesh):
    torch.manual_seed(0)
    full = torch.arange(64 * 8, dtype=torch.float32).reshape(64, 8)
    sd = {
        "model.w": distribute_tensor(full, mesh, [Shard(0)]) if mesh else full,
        "model.b": torch.ones(16, dtype=torch.bfloat16) * (rank + 1 if not mesh else 1),
        "step": 100,
        "extra": {"lr": 0.001, "names": ["a", "b"]},
    }
    return sd


def save(rank, world, out, threads, port):
    # TCPStore without libuv: Debian's torch is built without it.
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, use_libuv=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    writer = dcp.FileSystemWriter(out, thread_count=threads)
    dcp.save(state(rank, world, mesh), storage_writer=writer)
    dist.barrier()
    dist.destroy_process_group()


def record(folder):
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        md = pickle.load(f)
    sizes = {}
    for info in md.storage_data.values():
        end = info.offset + info.length
        sizes[info.relative_path] = max(sizes.get(info.relative_path, 0), end)
    return {"items": len(md.storage_data), "sizes": sizes,
            "on_disk": {n: os.path.getsize(os.path.join(folder, n)) for n in sorted(os.listdir(folder))}}


def main(root):
    want = {}
    for name, world, threads, port in (("world2", 2, 1, 29511), ("world4-threads2", 4, 2, 29512)):
        out = os.path.join(root, name)
        mp.spawn(save, args=(world, out, threads, port), nprocs=world, join=True)
        want[name] = record(out)
    single = os.path.join(root, "single")
    dcp.save(state(0, 1, None), storage_writer=dcp.FileSystemWriter(single))
    want["single"] = record(single)
    want["torch"] = torch.__version__
    with open(os.path.join(root, "want.json"), "w") as f:
        json.dump(want, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
