"""A plain PyTorch loop for the compat suite's `kind: command` job (tests/compat/run_compat.py).

Written as a user would, for any torch from 1.13 on and Python 3.9+: it prints `Epoch N/M`
lines (rsup's progress and the kill drill's epoch), `torch.save`s a checkpoint at the end
of every epoch and, given `--resume FILE`, loads it and goes on from the next epoch.

The checkpoint keeps the list of epochs done and, per epoch, the interpreter and torch
that ran it, so the suite can check every epoch ran exactly once, in the compat stack.
"""

import argparse
import os
import platform
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--save", required=True, help="checkpoint file written every epoch")
parser.add_argument("--resume", default=None, help="checkpoint to resume from (rsup's)")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
done = []
ran_by = []
if args.resume:
    state = torch.load(args.resume)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    done, ran_by = state["epochs_done"], state["ran_by"]
    print(f"resumed from {args.resume} after epoch {done[-1] if done else 0}", flush=True)

stack = {"python": platform.python_version(), "torch": torch.__version__}
for epoch in range(len(done) + 1, args.epochs + 1):
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 8)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.05)
        print(f"Epoch {epoch}/{args.epochs} step {step}/{args.steps} loss {loss.item():.4f}",
              flush=True)  # fmt: skip
    done.append(epoch)
    ran_by.append(stack)
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "epochs_done": done,
             "ran_by": ran_by}  # fmt: skip
    tmp = args.save + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, args.save)
print("plain done", done, flush=True)
