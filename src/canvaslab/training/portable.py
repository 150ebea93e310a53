"""A small copy of the training state, for going on with a run on another machine.

The exact checkpoint (``loop._save_checkpoint``: fp32 weights and both of AdamW's moments, 180 MB for
`mini`) cannot travel to or from a lent GPU machine (64 MiB each way, 16 MiB a file), so a run whose
machine is given back between device calls would have to start over. This copy is about a sixth of it
(`mini`: 30.5 MB in files under 15 MiB) and keeps what the run cannot do without:

- the weights in bf16 (rounding an fp32 master weight to bf16 moves it by at most 2^-8 of itself);
- AdamW's second moment factored as in Adafactor (Shazeer and Stern, 2018): for each matrix its row and
  column means, whose outer product over their grand mean has the same row and column sums; vectors whole;
- the step count of every parameter, so the bias correction goes on where it was;
- the loop's counters and history, and every random stream, so the examples and noise draws go on as in
  the uninterrupted run.

The first moment is not kept: it restarts at zero, so updates are small for the first ~10 steps after a
resume (beta1 0.9) while the momentum builds up again. A run resumed this way is not bit for bit the
uninterrupted one; it records the steps it resumed at (``portable_resumes``) for its model card.
"""

from __future__ import annotations

from pathlib import Path

import torch

from canvaslab.errors import CanvaslabError
from canvaslab.io import atomic_writer

FORMAT = 1
STATE_FILE = "state.pt"
# a file travels back from a device machine if it is under 16 MiB; torch.save adds a little to the bytes
# (a single tensor larger than this gets a file of its own: `mini`'s largest is 2 MiB)
SHARD_BYTES = 15 * 2**20
# the optimizer's implementation is the machine's own choice (fused on CUDA), not the saved run's
_IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")


def factored(second_moment: torch.Tensor) -> dict:
    """Row and column means of a matrix (the last axis is the column); a vector whole."""
    values = second_moment.detach().float().cpu()
    if values.ndim < 2:
        return {"full": values.clone()}
    matrix = values.reshape(-1, values.shape[-1])
    return {"rows": matrix.mean(1), "cols": matrix.mean(0), "shape": list(values.shape)}


def expanded(moment: dict) -> torch.Tensor:
    """The second moment that ``factored`` describes: exact for vectors, rank one for matrices."""
    if "full" in moment:
        return moment["full"].clone()
    rows, cols = moment["rows"], moment["cols"]
    grand = rows.mean()
    matrix = torch.outer(rows, cols) / grand if grand > 0 else torch.zeros(len(rows), len(cols))
    return matrix.reshape(moment["shape"])


def _unshared(model) -> dict[str, torch.Tensor]:
    """The state dict without its aliases (DiffusionGemma's decoder shares its weights with the encoder:
    the state dict names 30M values for `mini`'s 15M parameters)."""
    saved = model.state_dict().keys()
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}  # each tensor once
    return {name: tensor for name, tensor in named.items() if name in saved}


def _shards(weights: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    shards, size = [{}], 0
    for name, tensor in weights.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards, size = [*shards, {}], 0
        shards[-1][name], size = tensor, size + nbytes
    return shards


def save_portable(folder: Path, model, optimizer, loop_state: dict, rng_state: dict, settings: dict) -> None:
    """Write the portable state to ``folder``: weight shards first, ``state.pt`` (which names them) last, so
    a kill at any point leaves the previous state whole; shards no state names any more are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = {name: (t.detach().to(torch.bfloat16) if t.is_floating_point() else t.detach()).cpu().clone()
               for name, t in _unshared(model).items()}
    names = []
    for index, shard in enumerate(_shards(weights)):
        names.append(f"weights-step{loop_state['step']:06d}-{index:02d}.pt")
        with atomic_writer(folder / names[-1], binary=True) as handle:
            torch.save(shard, handle)
    optimizer_state = optimizer.state_dict()
    moments = {index: {"step": float(state["step"]), "second": factored(state["exp_avg_sq"])}
               for index, state in optimizer_state["state"].items()}
    payload = {"format": FORMAT, "settings": settings, "shards": names, "moments": moments,
               "param_groups": optimizer_state["param_groups"], "loop": loop_state, "rng": rng_state}
    with atomic_writer(folder / STATE_FILE, binary=True) as handle:
        torch.save(payload, handle)
    for stale in folder.glob("weights-*.pt"):
        if stale.name not in names:
            stale.unlink()


def has_portable(folder: Path | None) -> bool:
    return folder is not None and (folder / STATE_FILE).exists()


def portable_files(folder: Path) -> list[Path]:
    """The files of the state in ``folder``: ``state.pt`` and the shards it names (a save killed before its
    ``state.pt`` leaves newer shards beside them, which need not travel)."""
    names = torch.load(folder / STATE_FILE, weights_only=True)["shards"]
    return [folder / STATE_FILE, *(folder / name for name in names)]


def _load_weights(folder: Path, shards: list[str], model) -> None:
    weights = {}
    for name in shards:
        weights.update(torch.load(folder / name, weights_only=True))
    if weights.keys() != _unshared(model).keys():
        raise CanvaslabError(f"{folder}: the portable weights are not this model's (other parameter names)")
    try:
        model.load_state_dict(weights, strict=False)  # into the fp32 master weights; the aliases follow
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise CanvaslabError(f"{folder}: the portable weights do not fit this model ({lines[-1]})") from None


def _load_moments(payload: dict, optimizer) -> None:
    """The saved step counts and second moments, a zero first moment; this machine's implementation."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    state = {index: {"step": torch.tensor(moment["step"]), "exp_avg": torch.zeros_like(parameters[index]),
                     "exp_avg_sq": expanded(moment["second"]).to(parameters[index])}
             for index, moment in payload["moments"].items()}
    implementation = [{k: group[k] for k in _IMPLEMENTATION if k in group} for group in optimizer.param_groups]
    optimizer.load_state_dict({"state": state, "param_groups": payload["param_groups"]})
    for group, own in zip(optimizer.param_groups, implementation):
        group.update(own)


def restore_portable(folder: Path, model, optimizer, settings: dict) -> tuple[dict, dict]:
    """Load the portable state into ``model`` and ``optimizer``; its loop state and random streams.

    Refuses (CanvaslabError) a state written by a run with other settings: its steps would not be this
    run's."""
    payload = torch.load(folder / STATE_FILE, weights_only=True)
    if payload.get("format") != FORMAT:
        raise CanvaslabError(f"{folder}: portable training state of format {payload.get('format')}, not {FORMAT}")
    if payload["settings"] != settings:
        changed = sorted(k for k in {*settings, *payload["settings"]} if payload["settings"].get(k) != settings.get(k))
        raise CanvaslabError(f"{folder}: the portable training state is another run's ({', '.join(changed)} differ)")
    _load_weights(folder, payload["shards"], model)
    _load_moments(payload, optimizer)
    return payload["loop"], payload["rng"]
