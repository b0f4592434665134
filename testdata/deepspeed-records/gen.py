"""Saves DeepSpeed-shaped checkpoint steps under testdata/deepspeed-records
with torch 2.6 (the Debian 13 root `make trixie` builds), so that ferry's
reader of DeepSpeed's record is tested on bytes torch.save writes, not on
what we remember it writes. DeepSpeed itself is not installable here; the
dicts below have the keys DeepSpeed v0.19.5 saves, in its order:

  - deepspeed/runtime/engine.py DeepSpeedEngine._common_checkpoint_state:
    the model states file of each model-parallel rank
    ("mp_rank_{mp:02d}_model_states.pt", _get_ckpt_name; under ZeRO-3
    "zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt"), holding
    dp_world_size (self.seq_dp_world_size) and mp_world_size;
  - DeepSpeedEngine._save_zero_checkpoint: each data-parallel rank's
    "{bf16_}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"
    (_get_zero_ckpt_name), dict(optimizer_state_dict, ds_config,
    ds_version);
  - torch.save through TorchCheckpointEngine.save (zip serialization).

    testdata/deepspeed-records/regen.sh

want.json gives, per step, the world sizes each model states file records.
"""
import collections
import json
import os
import sys

import torch

VERSION = "0.19.5"


def config(bf16, stage, dp):
    return {
        "train_batch_size": 8 * dp,
        "train_micro_batch_size_per_gpu": 8,
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": False},
        "zero_optimization": {"stage": stage, "overlap_comm": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999]}},
        "steps_per_print": 10,
    }


def model(mp):
    torch.manual_seed(mp)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


def model_states(m, stage, dp, mp, pp, cfg):
    sd = m.state_dict()
    zero = stage > 0
    return dict(
        module=sd if stage < 3 else collections.OrderedDict(),
        buffer_names=[],
        optimizer=None if zero else torch.optim.AdamW(m.parameters()).state_dict(),
        param_shapes=[collections.OrderedDict((k, v.shape) for k, v in sd.items())] if zero else None,
        frozen_param_shapes=None,
        shared_params={} if zero else None,
        frozen_param_fragments=None,
        lr_scheduler={"last_epoch": 100, "_step_count": 101, "base_lrs": [1e-4]},
        data_sampler=None,
        random_ltd=None,
        sparse_tensor_module_names=set(),
        skipped_steps=0,
        global_steps=100,
        global_samples=800 * dp,
        dp_world_size=dp,
        mp_world_size=mp,
        checkpoint_parallel_dimensions={"pp_degree": pp, "tp_degree": mp // pp},
        ds_config=cfg,
        ds_version=VERSION,
    )


def optim_states(m, dp_rank, cfg):
    opt = torch.optim.AdamW(m.parameters())
    loss = m(torch.ones(2, 8)).sum()
    loss.backward()
    opt.step()
    sd = opt.state_dict()
    return dict(optimizer_state_dict={"loss_scaler": None, "dynamic_loss_scale": False, "overflow": False,
                                      "partition_count": [cfg["_dp"]], "zero_stage": cfg["zero_optimization"]["stage"],
                                      "base_optimizer_state": sd, "fp32_flat_groups": [torch.zeros(4) + dp_rank]},
                ds_config={k: v for k, v in cfg.items() if k != "_dp"}, ds_version=VERSION)


def step(out, name, stage, dp, mp, pp=1, bf16=False):
    tag = os.path.join(out, name, "global_step100")
    os.makedirs(tag)
    cfg = config(bf16, stage, dp)
    want = {}
    for r in range(mp):
        m = model(r)
        if stage == 3:
            for d in range(dp):
                f = f"zero_pp_rank_{d}_mp_rank_{r:02d}_model_states.pt"
                torch.save(model_states(m, stage, dp, mp, pp, cfg), os.path.join(tag, f))
                want[f] = {"dp_world_size": dp, "mp_world_size": mp}
        else:
            f = f"mp_rank_{r:02d}_model_states.pt"
            torch.save(model_states(m, stage, dp, mp, pp, cfg), os.path.join(tag, f))
            want[f] = {"dp_world_size": dp, "mp_world_size": mp}
        if stage > 0 or bf16:
            prefix = "bf16_" if bf16 else ""
            for d in range(dp):
                f = f"{prefix}zero_pp_rank_{d}_mp_rank_{r:02d}_optim_states.pt"
                torch.save(optim_states(m, d, dict(cfg, _dp=dp)), os.path.join(tag, f))
    with open(os.path.join(out, name, "latest"), "w") as fd:
        fd.write("global_step100")
    return want


def main(out):
    want = {
        "zero2-dp4": step(out, "zero2-dp4", stage=2, dp=4, mp=1),
        "bf16-zero1-dp2-mp2": step(out, "bf16-zero1-dp2-mp2", stage=1, dp=2, mp=2, bf16=True),
        "zero3-dp2": step(out, "zero3-dp2", stage=3, dp=2, mp=1),
    }
    with open(os.path.join(out, "want.json"), "w") as fd:
        json.dump(want, fd, indent=1, sort_keys=True)
        fd.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
