"""Deepen a trained qwen3 model by appending layers that start as the identity.

Each new layer copies the weights of the model's last layer, except its two output projections
(attention wo and FFN down), which start at zero: the residual stream passes through unchanged,
so the grown model computes exactly what the original did, and distillation (train_draft.py
--init) then only has to learn what the extra depth adds. Used to give the bundled draft model
more capacity without losing what its earlier phases learnt.

    /usr/bin/python3 -m dspark_train grow-draft --ckpt $DSPARK_TRAIN_DIR/draft-v3/ckpt.pt \
        --n-layer 4 --out $DSPARK_TRAIN_DIR/draft-grown/ckpt.pt
"""
import argparse
from pathlib import Path

import torch

from . import trainutil as tu
from .model import Qwen3, Qwen3Config


def grow(config, state, n_layer):
    old = config["n_layer"]
    if n_layer <= old:
        raise SystemExit(f"--n-layer {n_layer}: the model already has {old} layers")
    state = dict(state)
    last = f"blocks.{old - 1}."
    for il in range(old, n_layer):
        for k, v in list(state.items()):
            if k.startswith(last):
                name = k[len(last):]
                zero = name in ("attn.wo.weight", "ffn.down.weight")
                state[f"blocks.{il}.{name}"] = torch.zeros_like(v) if zero else v.clone()
    return {**config, "n_layer": n_layer}, state


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="training checkpoint of the model to deepen")
    ap.add_argument("--n-layer", type=int, required=True, help="layers of the grown model")
    ap.add_argument("--out", required=True, help="checkpoint to write (for train_draft.py --init)")
    a = ap.parse_args(argv)
    ck = tu.load_checkpoint(Path(a.ckpt))
    if ck is None:
        raise SystemExit(f"no checkpoint at {a.ckpt}")
    config, state = grow(ck["config"], ck["model"], a.n_layer)
    model = Qwen3(Qwen3Config(**config))
    model.load_state_dict(state)  # every tensor present, shapes right
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tu.save_checkpoint(Path(a.out), {"config": config, "model": state, "step": ck.get("step", 0),
                                     "grown_from": str(a.ckpt)})
    print(f"wrote {a.out}: {ck['config']['n_layer']} -> {a.n_layer} layers, "
          f"{model.num_params() / 1e6:.2f}M params", flush=True)


if __name__ == "__main__":
    main()
