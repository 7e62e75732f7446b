"""Per-round device work of an :class:`~specdec.engine.Engine` outside its target forward, counted on the CPU.

On a GPU every aten op on a device tensor is a kernel launch (5-20 us of host time) and every read of a
device tensor's value (``item``, ``tolist``, ``bool``, ``int``, ``cpu``, ``torch.equal``) a full
synchronisation. On the CPU both are cheap, so the counter decides what WOULD live on the device:

* device tensors are the target forward's outputs (logits, hidden taps) and the prompts (which
  ``add_request`` requires on the target's device), and everything an aten op computes from a device
  tensor, including a tensor an in-place op writes device values into (by storage: views share it);
* every other tensor is a host tensor (what the engine builds from Python values);
* an op with a device tensor among its arguments counts as one device op; ``_local_scalar_dense``
  (``item`` / ``int`` / ``bool`` / ``__index__``) and ``equal`` on a device tensor, and ``tolist`` /
  ``cpu`` / ``numpy`` of one, count as one device read (its value goes to the host, which becomes a host
  tensor).

Not counted: copies of host data to the device (on the CPU they look like host work). The engine makes
one per round for all host-decided requests' row tokens, plus one per request for the context of a
drafter that reads it on the device, and for a tree's positions and mask; all without a stream sync.

Nothing is counted inside the target's forward (the forward is the work being amortised) and device
storages are kept alive while counting, so a freed device storage is never mistaken for a host one.

Run ``python -m tests.engine.round_counts`` for the table of the engine at concurrency 16 on the tiny
target: an oracle drafter (preset ``specpilot-one-level``, chain, greedy) and AR (no drafts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.equal.default}


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class DeviceWorkCounter(TorchDispatchMode):
    """Counts device ops and device reads outside the forwards of one target (see the module docstring).

    Attributes:
        ops, reads: the counts so far (reset them between rounds).
        per_op: op name -> count, for reading where the ops come from.
    """

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.reads = 0
        self.per_op: dict[str, int] = {}
        self.paused = False
        self._device: set[int] = set()
        self._empty: set[int] = set()  # ids of empty device tensors (they have no storage to tell by)
        self._keep: list[torch.Tensor] = []

    def mark(self, *tensors: torch.Tensor) -> None:
        """Declare ``tensors`` device tensors."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                if t.untyped_storage().nbytes():
                    self._device.add(_storage(t))
                else:
                    self._empty.add(id(t))
                self._keep.append(t)

    def is_device(self, t: object) -> bool:
        if not isinstance(t, torch.Tensor):
            return False
        return _storage(t) in self._device if t.untyped_storage().nbytes() else id(t) in self._empty

    def read(self, t: object) -> None:
        if not self.paused and self.is_device(t):
            self.reads += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(self.is_device(t) for t in inputs):
            if func in READS:
                self.reads += 1
                return out
            self.ops += 1
            name = str(func.overloadpacket.__name__)
            self.per_op[name] = self.per_op.get(name, 0) + 1
            written = [
                a for a, spec in zip(args, func._schema.arguments) if spec.alias_info is not None and spec.alias_info.is_write
            ]
            self.mark(*[t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)], *written, *kwargs.get("out", ()) or ())
        return out

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        paused, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = paused


@contextlib.contextmanager
def counting(target) -> Iterator[DeviceWorkCounter]:
    """Count device work outside ``target.forward`` (a ragged target) while the block runs.

    Patches the instance's ``forward`` (paused inside, its outputs marked device) and the tensor
    methods that read values without an aten op on the CPU (``tolist``, ``cpu``, ``numpy``).
    """
    counter = DeviceWorkCounter()
    forward = target.forward

    def counted_forward(*args, **kwargs):
        with counter.pause():
            outs = forward(*args, **kwargs)
        for out in outs:
            counter.mark(out.logits, *out.hidden)
        return outs

    patched: dict[str, Callable] = {}

    def reading(name: str) -> None:
        original = getattr(torch.Tensor, name)
        patched[name] = original

        def method(self, *args, **kwargs):
            device = counter.is_device(self) and not counter.paused
            counter.read(self)
            with counter.pause():
                value = original(self, *args, **kwargs)
                # on a GPU the value read is a new host tensor; on the CPU ``cpu()`` returns the tensor itself
                return value.clone() if device and value is self else value

        setattr(torch.Tensor, name, method)

    target.forward = counted_forward
    for name in ("tolist", "cpu", "numpy"):
        reading(name)
    try:
        with counter:
            yield counter
    finally:
        del target.forward
        for name, original in patched.items():
            setattr(torch.Tensor, name, original)


def engine_rounds(engine, target, prompts, *, max_new_tokens: int, per_op: bool = False) -> list[tuple]:
    """Run ``prompts`` through ``engine``; per step: ``(running requests, device ops, device reads)``.

    With ``per_op``, each step's tuple ends with its ``{op name: count}``. The prompts are marked device
    tensors (``add_request`` wants them on the target's device).
    """
    rounds = []
    with counting(target) as counter:
        for p in prompts:
            counter.mark(p)
            engine.add_request(p, max_new_tokens=max_new_tokens)
        while engine.has_work:
            counter.ops = counter.reads = 0
            counter.per_op = {}
            running = len(engine.running) + len(engine.waiting)
            engine.step()
            rounds.append(
                (running, counter.ops, counter.reads, counter.per_op) if per_op else (running, counter.ops, counter.reads)
            )
    return rounds


def tiny_engine(*, concurrency: int, spec: bool, prompt_len: int = 12, max_new_tokens: int = 48, seed: int = 0):
    """The tiny Qwen3-shape target of the smoke benchmarks, ``concurrency`` prompts, and an engine over it.

    ``spec``: an oracle drafter (preset ``specpilot-one-level``) following each request's own greedy
    continuation (from a run of the same engine without drafts), chain verification; else AR.
    Returns ``(engine, ragged target, prompts)``.
    """
    from benchmarks.common import TINY_QWEN3
    from specdec.drafters import NGramDrafter
    from specdec.drafters.oracle import PRESETS, OracleDrafter
    from specdec.engine import Engine
    from specdec.models import DenseTarget
    from specdec.models.config import TargetConfig
    from specdec.models.ragged import RaggedDenseTarget

    cfg = TargetConfig(**TINY_QWEN3)
    torch.manual_seed(seed)
    profile = PRESETS["specpilot-one-level"]
    k = profile.num_drafts
    dense = DenseTarget(cfg, max_seq_len=prompt_len + max_new_tokens + k + 8).eval().requires_grad_(False)
    ragged = RaggedDenseTarget(dense, slots=concurrency, layout="packed")
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, cfg.vocab_size, (prompt_len,), generator=gen) for _ in range(concurrency)]
    ar = Engine(ragged, NGramDrafter(), max_batch=concurrency, num_draft_tokens=0)
    ids = [ar.add_request(p, max_new_tokens=max_new_tokens) for p in prompts]
    ar.run()
    if not spec:
        return Engine(ragged, NGramDrafter(), max_batch=concurrency, num_draft_tokens=0), ragged, prompts
    references = [torch.cat([p, ar.output(i)]) for p, i in zip(prompts, ids)]
    made = iter(range(concurrency))

    def oracle():
        i = next(made)
        return OracleDrafter(profile, references=[references[i]], vocab_size=cfg.vocab_size, seed=i)

    return Engine(ragged, oracle, max_batch=concurrency, num_draft_tokens=k), ragged, prompts


def main() -> None:
    for spec in (False, True):
        engine, ragged, prompts = tiny_engine(concurrency=16, spec=spec, max_new_tokens=48)
        rounds = engine_rounds(engine, ragged, prompts, max_new_tokens=48)
        steady = [r for r in rounds[1:] if r[0] == 16]
        name = "spec (oracle, chain, greedy)" if spec else "AR"
        print(f"{name}: {len(rounds)} steps; prefill step: {rounds[0][1]} ops, {rounds[0][2]} reads")
        if steady:
            ops = sum(r[1] for r in steady) / len(steady)
            reads = sum(r[2] for r in steady) / len(steady)
            print(f"  per round with 16 running ({len(steady)} rounds): {ops:.1f} device ops, {reads:.1f} device reads")
        print(f"  all steps: {[(r[1], r[2]) for r in rounds]}")


if __name__ == "__main__":
    main()
