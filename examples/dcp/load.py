#!/usr/bin/python3
"""Load DCP steps at another world size and check them against the
trainer's reference (run inside the trixie root, by scenario.sh):

    load.py --nprocs W [model flags] STEP_DIR REF_JSON [STEP_DIR REF_JSON ...]

Each rank builds the model sharded over W ranks, `dcp.load`s the step
(DCP reshards the 4-rank shards onto W) into `get_state_dict(model, optim)`,
applies it with `set_state_dict`, reads it back with `get_state_dict` and
gathers every tensor: the SHA-256 of each gathered model and optimizer
tensor, and every other value, must equal REF_JSON (written by the 4-rank
trainer before it saved that step). Exit 1 naming the first difference.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, required=True)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("pairs", nargs="+")
    a = p.parse_args()
    if len(a.pairs) % 2:
        p.error("want STEP_DIR REF_JSON pairs")
    common.launch(a.nprocs, sys.argv)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    rank, world = common.init()
    bad = 0
    for d, ref_path in zip(a.pairs[::2], a.pairs[1::2]):
        model, opt, _ = common.build(a.dim, a.hidden, a.layers, world)
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "train": {"step": -1}}
        dcp.load(state, checkpoint_id=d)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        msd, osd = get_state_dict(model, opt)
        got = common.digest({"model": msd, "optim": osd})
        if rank:
            continue
        with open(ref_path) as f:
            want = json.load(f)
        diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        name = os.path.basename(os.path.normpath(d))
        if diff:
            bad += 1
            print(f"FAIL: {d} loaded at {world} ranks differs from {ref_path} in {len(diff)} of "
                  f"{len(want)} entries, first {diff[0]}: {got.get(diff[0])} != {want.get(diff[0])}", flush=True)
        else:
            print(f"  {name} (train step {state['train']['step']}) loaded at {world} ranks: "
                  f"{len(got)} model and optimizer entries equal the 4-rank reference", flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(1 if bad else 0)


if __name__ == "__main__":
    main()
