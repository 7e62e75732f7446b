"""The engine at concurrency 1, 4, 16, 24: batched speculative decoding against batched AR, Qwen3-8B or Qwen3.5-4B shape.

Question: how many tokens per second does :class:`specdec.engine.Engine` deliver when it verifies
every running request in one target forward, against batched AR decoding on the same engine (the
drafter proposing nothing), and which mechanism carries the difference: the global verify budget
(switched off: every request verifies its whole chain) and the packed layout (switched to
``per_request``: each request's linear layers run on its rows alone, so the weights are read once
per request instead of once per round).

Acceptance is simulated (:class:`specdec.OracleDrafter`, preset ``specpilot-one-level``: the target's
own greedy continuation with misses drawn from SpecPilot's reported one-level acceptance), since random
weights give a real drafter nothing to learn. The weights are random bf16 at the Qwen3-8B shape; with
``--weights planted`` their embedding and head carry a planted successor rule
(:func:`specdec.models.plant_successor_rule`): the greedy continuation is then known and no bf16 rounding of
any batch shape moves it, so the simulated acceptance holds in bf16 and every output must equal AR.

Each case runs once untimed (CUDA graphs captured; each request's own output, added as its oracle's first
reference, since in bf16 a batched or verify pass rounds differently from AR and the output drifts from
the AR continuation the oracle would otherwise follow) and then timed; ``equal_to_warmup`` records whether
the timed outputs repeat the warm-up's. The goal cases (concurrency >= 16) run first, the ablations after.

Correctness: concurrency 1 runs every request alone, which is the reference. The ``packed`` layout is
not batch-invariant in bf16 (a row's GEMM result depends on how many rows share the call), so every
batched run's requests are compared with their alone output and the mismatches are counted, not
hidden. The ``budget auto`` system allocates against the step-time table plus a constant per round: the host
work of the engine's round, the AR run's time per pass minus the table's time at its row count.

With ``--dtype float32`` or ``--weights planted`` the script requires every speculative run to equal AR
of the same concurrency (``torch.equal``) and exits 1 otherwise.

Every engine, AR included, caps the rows of one target forward (``--max-pass-rows``, default ``auto``: the
packed target's largest graph bucket, 256, where the engine can hold every forward within it; a ``per_request``
target has no buckets, so no cap): a joining request's prompt is prefilled in chunks beside the
other requests' verify rows instead of pushing a forward past the largest bucket, where it would run eagerly.
Budget-off cases whose ``max_batch`` full rounds exceed the bucket (24 x 16 rows) run without a cap. Each row
records the cap applied (``max_pass_rows``), the forwards past the largest bucket (``eager_passes``), the largest
forward and the prompt rows (``prefill_rows``).

``--model qwen3.5-4b`` runs the same cases on a random hybrid target at the Qwen3.5-4B shape (24 Gated
DeltaNet + 8 gated attention layers; :func:`specdec.models.hybrid.random_hybrid_target`) through
:class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`: ``packed`` runs every linear layer once over all
requests and the GDN kernels batched over the requests' padded trees, ``per_request`` runs each request through
the batch-1 code path. ``packed`` replays CUDA graphs for forwards whose requests have at most 64 rows each
(decode and verify rounds; :mod:`specdec.models.ragged_hybrid_static`), checked against its eager static path as
for the dense target; a forward with a prefill chunk of more than 64 rows runs eagerly, and so does every
``per_request`` forward (launch-bound: about 77 ms a batch-1 AR step on an H200). Each slot holds, beside its
attention KV, two GDN recurrent states (float32) and two conv states per GDN layer (``gdn_state_bytes_per_layout``).

``--model smollm2-pair`` runs the real pair: SmolLM2-135M-Instruct (:func:`specdec.data.smollm2_target`, bf16 on
CUDA, float32 on the CPU) and the trained DFlash drafter that ships with specdec, on held-out HumanEval prompts
(problems 0..N-1, chat template; the drafter never trained on 0..39), greedy, each request stopping at the
target's EOS. Acceptance is real (no oracle, no planted weights: ``--weights``, ``--profile`` and
``--prompt-len`` are refused). Spec systems: the trained drafter as a chain (``num_draft_tokens`` = its block's
7 drafts) and as a tree (``load_drafter(..., tree_budget=B)`` with ``TreeVerifier(B)``, ``--tree-budget``), and
:class:`~specdec.drafters.NGramDrafter` as a chain of 7, each with the verify budget auto and off. The trained
drafter drafts batched (``Engine(batched_drafting=True)``: one feature ingestion and one block forward a round for
all requests, eager) when it has a ``batched(...)`` form, else per request; ``"trained chain, drafts per request"``
is the chain with batched drafting switched off (one eager block forward per request a round); the JSON records
which (``drafting``). In float32 every speculative output must equal batched AR; in
bf16 the mismatches against batched AR and alone are counted (near-ties may flip), not failed on.

Run on a GPU machine: ``python -m benchmarks.decode.bench_engine`` (writes ``$OUT/bench_engine.json``
and ``bench_engine.png``). CPU smoke test (same code path, tiny float32 model):
``python -m benchmarks.decode.bench_engine --smoke`` (``--smoke --model qwen3.5-4b``: a tiny float32 hybrid; ``--smoke --model smollm2-pair``: the real pair in float32,
2 prompts, 4 new tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import TINY_QWEN3, agg_pyplot, provenance, provenance_line, write_json
from benchmarks.decode.bench_hybrid import QWEN3_5_4B
from benchmarks.decode.bench_hybrid import SMOKE as TINY_HYBRID
from benchmarks.kernels.bench_roofline import step_kernel_breakdown
from specdec import data
from specdec.drafters import NGramDrafter, load_drafter
from specdec.drafters.block.config import read_drafter_config
from specdec.drafters.oracle import PRESETS, OracleDrafter
from specdec.engine import Engine
from specdec.engine.budget import StepTimeTable
from specdec.models import QWEN3_8B, DenseTarget
from specdec.models.config import TargetConfig
from specdec.models.elementwise import elementwise_kernels
from specdec.models.hybrid import HybridConfig, random_hybrid_target
from specdec.models.planted import plant_successor_rule, successor_chain
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.verify import ChainVerifier, TreeVerifier

TINY = TargetConfig(**TINY_QWEN3)
HELD_OUT_PROBLEMS = 40  # HumanEval problems 0..39: never in the shipped SmolLM2 drafter's training data


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kv_bytes(cfg: TargetConfig, dtype: torch.dtype, slots: int, max_seq_len: int) -> int:
    """Bytes of the ragged target's KV cache: layers x kv heads x head dim x (K, V) x dtype bytes per token."""
    per_token = cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * torch.finfo(dtype).bits // 8
    return per_token * slots * max_seq_len


def hybrid_cache_bytes(
    cfg: HybridConfig, dtype: torch.dtype, slots: int, max_seq_len: int, state_slots: int = 2, *, packed: bool = False
) -> dict:
    """Bytes of a :class:`RaggedHybridTarget`'s caches: attention KV, and the GDN states of every slot's state ring
    (``packed``: one slot more, the scratch slot of the fixed-shape forwards' padding).

    ``kv``: attention layers x kv heads x head dim x (K, V) x dtype bytes per token; ``gdn_states``: per slot
    ``state_slots`` x GDN layers x (the float32 recurrent state ``[Hv, dk, dv]`` + the conv state
    ``[conv_dim, W - 1]`` in ``dtype``), whatever the tokens.

    Example:
        >>> hybrid_cache_bytes(TINY_HYBRID, torch.float32, slots=2, max_seq_len=10)
        {'kv': 5120, 'gdn_states': 233472}
    """
    width = torch.finfo(dtype).bits // 8
    kv_per_token = len(cfg.attention_layers) * cfg.num_kv_heads * cfg.head_dim * 2 * width
    recurrent = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    conv = cfg.conv_dim * (cfg.linear_conv_kernel_dim - 1) * width
    slots += packed
    return {
        "kv": kv_per_token * slots * max_seq_len,
        "gdn_states": slots * state_slots * len(cfg.gdn_layers) * (recurrent + conv),
    }


def decode(
    ragged,
    prompts,
    *,
    concurrency,
    drafter,
    num_draft_tokens,
    verify_budget=None,
    step_time=None,
    max_new_tokens,
    verifier=None,
    batched_drafting=False,
    eos_token_id=None,
    max_pass_rows="auto",
    split_forward=False,
    kernel_profile_steps=0,
):
    """Run ``prompts`` through one engine of ``concurrency`` slots; tokens, wall seconds, per-request latency, rounds.

    ``verifier`` (default a chain), ``batched_drafting``, ``max_pass_rows`` and ``eos_token_id`` go to the
    :class:`Engine` and its requests. Besides the times: the cap the engine applied (``max_pass_rows``, ``None``
    = none), the prompt rows its forwards held (``prefill_rows``), its largest forward (``max_rows_per_pass``) and
    the forwards past the target's largest row bucket (``eager_passes``: run eagerly, outside any CUDA graph;
    ``None`` for a target without buckets, whose every forward is eager). ``split_forward``: each target forward
    is also timed between two device syncs (``forward_ms_per_pass``; the rest of a pass, the engine's host work and
    its kernels outside the forward, is ``outside_forward_ms_per_pass``); the syncs add a little to every pass.
    ``kernel_profile_steps``: after 20 steps, that many steps run under ``torch.profiler`` and their device time
    by kernel category is returned as ``kernel_profile`` (CUDA; on a CPU only its ``passes`` and
    ``graphs_captured``); the run's time then includes the profiler: for untimed runs.

    Example:
        >>> from specdec.testing import tiny_target
        >>> ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed")
        >>> ragged.enable_static_path((1, 2, 4, 8))
        >>> prompts = [torch.arange(1, 13), torch.arange(2, 9)]  # 19 prompt rows
        >>> run = {cap: decode(ragged, prompts, concurrency=2, drafter=NGramDrafter(), num_draft_tokens=0, max_new_tokens=3,
        ...                    max_pass_rows=cap) for cap in (None, "auto")}
        >>> [(r["max_pass_rows"], r["eager_passes"], r["max_rows_per_pass"], r["prefill_rows"]) for r in run.values()]
        [(None, 1, 19, 19), (8, 0, 8, 19)]
    """
    engine = Engine(
        ragged,
        drafter,
        verifier,
        max_batch=concurrency,
        num_draft_tokens=num_draft_tokens,
        verify_budget=verify_budget,
        step_time=step_time,
        batched_drafting=batched_drafting,
        max_pass_rows=max_pass_rows,
    )
    ids = [engine.add_request(p, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id) for p in prompts]
    joined, finished, nodes, pass_rows, pass_prefill, pass_forward_s, pass_request_rows = {}, {}, [], [], [], [], []
    device = ragged.device
    forward_s, request_rows = [0.0], [0]  # with split_forward: the largest request's rows in this step's forwards
    own_forward = vars(ragged).get("forward")  # a forward set on the instance (a wrapper), restored after
    if split_forward:
        forward = ragged.forward

        def timed_forward(requests, *args, **kwargs):
            request_rows[0] = max(request_rows[0], max((r.tokens.shape[1] for r in requests), default=0))
            sync(device)
            start = time.perf_counter()
            out = forward(requests, *args, **kwargs)
            sync(device)
            forward_s[0] += time.perf_counter() - start
            return out

        ragged.forward = timed_forward
    keys_before = len(ragged.static_keys)  # a key first run inside the timed steps is a CUDA-graph capture there
    sync(device)
    t0 = time.perf_counter()

    def one_step():
        before = time.perf_counter() - t0
        waiting, prefill_before, forward_before = set(engine.waiting), engine.prefill_rows, forward_s[0]
        request_rows[0] = 0
        engine.step()
        now = time.perf_counter() - t0
        nodes.append(sum(engine.last_allocation.values()))
        pass_rows.append(engine.last_pass_rows)
        pass_prefill.append(engine.prefill_rows - prefill_before)
        pass_forward_s.append(forward_s[0] - forward_before)
        pass_request_rows.append(request_rows[0])
        for rid in ids:
            if rid in waiting and rid not in engine.waiting:
                joined[rid] = before
            if rid not in finished and engine.status(rid) == "finished":
                finished[rid] = now

    kernel_profile = None
    while engine.has_work:
        if kernel_profile is None and kernel_profile_steps and len(pass_rows) == 20:
            # steps counted past the end of the work would do nothing: the profile is of steps that ran
            passes_before, graphs_before = engine.target_passes, len(ragged.static_keys)
            kernel_profile = step_kernel_breakdown(one_step, device, steps=kernel_profile_steps, top=12)
            kernel_profile["passes"] = engine.target_passes - passes_before
            kernel_profile["graphs_captured"] = len(ragged.static_keys) - graphs_before  # a capture inflates the profile
            continue
        one_step()
    sync(device)
    seconds = time.perf_counter() - t0
    if split_forward:
        if own_forward is None:
            del ragged.forward  # the class's forward again
        else:
            ragged.forward = own_forward
    tokens = [engine.output(rid).cpu() for rid in ids]
    latency = sorted(finished[rid] - joined[rid] for rid in ids)
    rounds = sum(engine.request(rid).rounds for rid in ids)
    unmatched = sum(getattr(engine.request(rid).drafter, "unmatched_rounds", 0) for rid in ids)
    accepted = sum(engine.request(rid).accepted for rid in ids)
    buckets = ragged.row_buckets
    return dict(
        tokens=tokens,
        seconds=seconds,
        new_tokens=sum(t.numel() for t in tokens),
        tokens_per_s=sum(t.numel() for t in tokens) / seconds,
        latency_s_median=latency[len(latency) // 2],
        latency_s_max=latency[-1],
        target_passes=engine.target_passes,
        ms_per_pass=1e3 * seconds / max(1, engine.target_passes),
        unmatched_rounds=unmatched,
        accepted_per_round=accepted / max(1, rounds),
        budget_nodes_per_pass=sum(nodes) / max(1, len(nodes)) if verify_budget is not None else None,
        graphs_captured=len(ragged.static_keys) - keys_before,
        max_pass_rows=engine.max_pass_rows,
        prefill_rows=engine.prefill_rows,
        max_rows_per_pass=max(pass_rows, default=0),
        eager_passes=sum(rows > buckets[-1] for rows in pass_rows) if buckets else None,
        passes_by_bucket=passes_by_bucket(
            buckets,
            pass_rows,
            pass_prefill,
            pass_forward_s if split_forward else None,
            pass_request_rows if split_forward else None,
        ),
        **({"kernel_profile": kernel_profile} if kernel_profile is not None else {}),
        **(
            dict(
                forward_ms_per_pass=1e3 * forward_s[0] / max(1, engine.target_passes),
                outside_forward_ms_per_pass=1e3 * (seconds - forward_s[0]) / max(1, engine.target_passes),
            )
            if split_forward
            else {}
        ),
    )


def passes_by_bucket(
    buckets: tuple[int, ...] | None,
    rows: list[int],
    prefill_rows: list[int],
    forward_s: list[float] | None,
    request_rows: list[int] | None = None,
) -> list[dict]:
    """The forwards of a run grouped by the row bucket they ran in (``"eager"`` past the largest, or without buckets).

    Per group: ``passes``, the mean rows they held, how many held prompt rows (``prefill_passes``: a joining
    request's chunk) and, with per-step forward seconds (``--split-forward``), the mean forward milliseconds. With
    each step's largest request (``request_rows``) the groups are split by that request's bucket too
    (``request_bucket``): the packed attention's per-slot query block is that wide for every slot. Steps without a
    forward (rows 0) are left out.

    Example:
        >>> passes_by_bucket((8, 16), [3, 8, 12, 20, 0], [0, 8, 0, 0, 0], [0.001, 0.002, 0.003, 0.004, 0.0])
        ... # doctest: +NORMALIZE_WHITESPACE
        [{'bucket': 8, 'passes': 2, 'mean_rows': 5.5, 'prefill_passes': 1, 'forward_ms': 1.5},
         {'bucket': 16, 'passes': 1, 'mean_rows': 12.0, 'prefill_passes': 0, 'forward_ms': 3.0},
         {'bucket': 'eager', 'passes': 1, 'mean_rows': 20.0, 'prefill_passes': 0, 'forward_ms': 4.0}]
        >>> [(g["bucket"], g["request_bucket"]) for g in passes_by_bucket((1, 8, 16), [8, 8], [0, 6], None, [1, 6])]
        [(8, 1), (8, 8)]
    """
    for name, values in (("prefill_rows", prefill_rows), ("forward_s", forward_s), ("request_rows", request_rows)):
        if values is not None and len(values) != len(rows):
            raise ValueError(f"{name}: expected {len(rows)} entries like rows, got {len(values)}")

    def bucket_of(r: int) -> int | str:
        return next((b for b in buckets or () if b >= r), "eager")

    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if r > 0:
            key = (bucket_of(r),) + (() if request_rows is None else (bucket_of(request_rows[i]),))
            groups.setdefault(key, []).append(i)

    def order(key: tuple) -> tuple:
        return tuple((isinstance(b, str), b if isinstance(b, int) else 0) for b in key)

    out = []
    for key in sorted(groups, key=order):
        steps = groups[key]
        entry = dict(bucket=key[0])
        if request_rows is not None:
            entry["request_bucket"] = key[1]
        entry.update(
            passes=len(steps),
            mean_rows=sum(rows[i] for i in steps) / len(steps),
            prefill_passes=sum(prefill_rows[i] > 0 for i in steps),
        )
        if forward_s is not None:
            entry["forward_ms"] = 1e3 * sum(forward_s[i] for i in steps) / len(steps)
        out.append(entry)
    return out


def bucket_line(groups: list[dict]) -> str:
    """One line of :func:`passes_by_bucket`'s groups: ``bucket[/request bucket]: passes (prefill passes) [forward ms]``.

    Example:
        >>> bucket_line([{"bucket": 8, "passes": 2, "mean_rows": 5.5, "prefill_passes": 1, "forward_ms": 1.5}])
        '8: 2 (1 prefill) 1.50 ms'
    """
    return "  ".join(
        f"{g['bucket']}"
        + (f"/{g['request_bucket']}" if "request_bucket" in g else "")
        + f": {g['passes']} ({g['prefill_passes']} prefill)"
        + (f" {g['forward_ms']:.2f} ms" if "forward_ms" in g else "")
        for g in groups
    )


def load_pair(
    requests: int, new_tokens: int, tree_budget: int, *, dtype: torch.dtype, device: torch.device, prompt_tail: int | None = None
):
    """SmolLM2-135M-Instruct, its trained DFlash drafter, and the chat prompts of HumanEval problems ``0 .. requests - 1``.

    Returns ``(target, drafter, prompts, max_seq_len)``: a :class:`DenseTarget` of ``max_seq_len`` (the longest
    prompt + ``new_tokens`` + room for a round of a block or a ``tree_budget`` tree), the drafter from
    ``load_drafter`` over it, and ``prompts`` as ``[P_i]`` int64 tensors on ``device`` (with ``prompt_tail``, each
    prompt's last ``prompt_tail`` tokens: the CPU smoke run's short prefills). Needs the SmolLM2
    checkpoint (or its GGUF), the tokenizer and the HumanEval file (:mod:`specdec.data`).

    Example:
        >>> target, drafter, prompts, max_seq_len = load_pair(2, 4, 16, dtype=torch.float32, device=torch.device("cpu"))  # doctest: +SKIP
        >>> type(drafter).__name__, drafter.max_draft_tokens, len(prompts)  # doctest: +SKIP
        ('DFlashDrafter', 7, 2)
    """
    if isinstance(requests, bool) or not isinstance(requests, int) or not 1 <= requests <= HELD_OUT_PROBLEMS:
        raise ValueError(
            f"--requests: expected 1..{HELD_OUT_PROBLEMS} (the held-out HumanEval problems) for smollm2-pair, got {requests!r}"
        )
    tokenizer = data.smollm2_tokenizer()
    prompts = [data.chat_prompt_ids(tokenizer, p)[0].to(device) for p in data.humaneval_prompts(range(requests))]
    if prompt_tail is not None:
        prompts = [p[-prompt_tail:] for p in prompts]
    path = data.smollm2_drafter_path()
    block = read_drafter_config(json.loads((Path(path) / "config.json").read_text())).block_size
    max_seq_len = max(p.numel() for p in prompts) + new_tokens + max(block, tree_budget) + 8
    target = data.smollm2_target(dtype=dtype, device=device, max_seq_len=max_seq_len, progress=False)
    target.eval().requires_grad_(False)
    return target, load_drafter(path, target), prompts, max_seq_len


def cases(
    levels: list[int], layouts: tuple[str, ...] = ("packed", "per_request"), spec_systems: tuple[str, ...] = ("spec",)
) -> list[tuple[str, int, str]]:
    """``(layout, concurrency, system)`` in run order: the goal cases (concurrency >= 16, or the largest one)
    first, AR before speculative, then the verify-budget ablation, the lower concurrencies, the layout ablation.
    Each of ``spec_systems`` runs as ``"<system>, budget auto"`` and ``"<system>, budget off"``.

    Example:
        >>> cases([1, 16])[:3]
        [('packed', 16, 'AR'), ('packed', 16, 'spec, budget auto'), ('packed', 16, 'spec, budget off')]
        >>> [name for _, c, name in cases([4], ("packed",), ("chain", "n-gram"))]
        ['AR', 'chain, budget auto', 'n-gram, budget auto', 'chain, budget off', 'n-gram, budget off']
    """
    auto = tuple(f"{s}, budget auto" for s in spec_systems)
    off = tuple(f"{s}, budget off" for s in spec_systems)
    goal = [c for c in levels if c >= 16] or [max(levels)]
    rest = sorted((c for c in levels if c not in goal), reverse=True)
    order = [("packed", c, name) for c in goal for name in ("AR", *auto)]
    order += [("packed", c, name) for c in goal for name in off]
    order += [("packed", c, name) for c in rest for name in ("AR", *auto, *off)]
    order += [("per_request", c, name) for c in goal + rest if c > 1 for name in ("AR", *auto)]
    return [case for case in order if case[0] in layouts]


def split_system(name: str) -> tuple[str | None, str | None]:
    """A case name's spec system and verify budget: ``(None, None)`` for AR.

    Example:
        >>> split_system("trained tree, budget auto"), split_system("AR")
        (('trained tree', 'auto'), (None, None))
    """
    if name == "AR":
        return None, None
    system, budget = name.rsplit(", budget ", 1)
    return system, {"auto": "auto", "off": None}[budget]


def pair_systems(trained, target, *, tree_budget: int, slots: int, max_context: int) -> dict:
    """The real pair's spec systems: name -> ``(drafter factory, shared drafter or BatchDrafter, verifier factory,
    num_draft_tokens, batched drafting)``.

    ``trained`` is the loaded DFlash drafter. ``"trained chain"`` and ``"trained tree"`` (best-first trees of
    ``tree_budget`` nodes) draft batched: one :class:`~specdec.drafters.block.BatchedBlockDrafter` of ``slots``
    slots (reused by every run: the engine resets a slot when a request joins) on its static path, with CUDA
    graphs on a GPU (one replay a round for all requests). The chain then runs with one mechanism switched
    off: ``"trained chain, batched eager"`` (the same batched drafter without the static path / graphs) and
    ``"trained chain, drafts per request"`` (each request its own drafter, one eager block forward a round).

    Example:
        >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> trained = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
        >>> systems = pair_systems(trained, target, tree_budget=5, slots=4, max_context=64)
        >>> {name: (k, batched) for name, (_, _, k, batched) in systems.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'trained chain': (7, True), 'trained tree': (5, True), 'trained chain, batched eager': (7, True),
         'trained chain, drafts per request': (7, False), 'n-gram': (7, False)}
    """
    kind, k = type(trained), trained.max_draft_tokens
    cuda = trained.model.fc.weight.device.type == "cuda"

    def batched(drafter, static: bool):
        batch = drafter.batched(slots=slots, max_context=max_context)
        if static:
            batch.enable_cuda_graphs() if cuda else batch.enable_static_path()
        return batch

    return {
        "trained chain": (batched(kind(trained.model, target), True), ChainVerifier, k, True),
        "trained tree": (
            batched(kind(trained.model, target, tree_budget=tree_budget), True),
            lambda: TreeVerifier(tree_budget),
            tree_budget,
            True,
        ),
        "trained chain, batched eager": (batched(kind(trained.model, target), False), ChainVerifier, k, True),
        "trained chain, drafts per request": (lambda: kind(trained.model, target), ChainVerifier, k, False),
        "n-gram": (NGramDrafter(), ChainVerifier, k, False),
    }


def enable_graphs(ragged: RaggedDenseTarget | RaggedHybridTarget, cuda: bool, disabled: bool) -> dict:
    """CUDA graphs on the packed target (on CPU: the same bucketed static path, eagerly).

    On CUDA a two-request forward is run as a replay and on the eager static path and compared; a
    capture that raises falls back to the eager static path, and the error is recorded.
    """
    if not cuda or disabled:
        ragged.enable_static_path()
        return {"mode": "static_path", "check_equal": None, "error": None}
    rows = [
        RequestRows(0, torch.arange(5, device=ragged.device)[None]),
        RequestRows(1, torch.arange(3, device=ragged.device)[None]),
    ]
    try:
        ragged.enable_static_path()
        eager = [o.logits.clone() for o in ragged.forward(rows)]
        ragged.enable_cuda_graphs()
        replayed = [o.logits.clone() for o in ragged.forward(rows)]
        equal = all(torch.equal(a, b) for a, b in zip(eager, replayed))
        info = {"mode": "cuda_graphs", "check_equal": equal, "error": None}
        ragged.enable_cuda_graphs()  # drop the check's graphs
    except Exception as err:  # recorded: the run goes on without graphs
        ragged.enable_static_path()
        info = {"mode": "static_path", "check_equal": None, "error": f"{type(err).__name__}: {err}"}
    for slot in (0, 1):
        ragged.reset(slot)
    print(f"packed target: {info}", flush=True)
    return info


def plot(result: dict, path: Path) -> str | None:
    """Throughput vs concurrency, one line per system; the PNG path, or why there is none."""
    try:
        plt = agg_pyplot()
    except ImportError as err:
        return f"no plot: {err}"
    fig, ax = plt.subplots(figsize=(6, 4))
    systems = sorted({(r["layout"], r["system"]) for r in result["rows"]})
    for layout, system in systems:
        rows = sorted(
            (r for r in result["rows"] if (r["layout"], r["system"]) == (layout, system)), key=lambda r: r["concurrency"]
        )
        ax.plot([r["concurrency"] for r in rows], [r["tokens_per_s"] for r in rows], marker="o", label=f"{system} ({layout})")
    ax.set_xlabel("concurrency (requests per forward)")
    ax.set_ylabel("tokens / s")
    weights = {"planted": "planted successor rule", "real": "real weights"}.get(result.get("weights"), "random weights")
    ax.set_title(f"Engine, {result['model']} {result['dtype']} ({weights}), {result['label']}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def word_or_positive_int(text: str, word: str) -> int | str | None:
    """``word``, ``"none"`` (``None``) or a positive int, for an argparse ``type``; anything else is refused."""
    if text in (word, "none"):
        return None if text == "none" else text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected '{word}', 'none' or an int >= 1, got {text!r}")
    return int(text)


def pass_rows_arg(text: str) -> int | str | None:
    """``--max-pass-rows``: ``"auto"``, ``"none"`` (no cap) or a positive int.

    Example:
        >>> pass_rows_arg("auto"), pass_rows_arg("none"), pass_rows_arg("256")
        ('auto', None, 256)
    """
    return word_or_positive_int(text, "auto")


def long_rows_arg(text: str) -> int | str | None:
    """``--long-request-rows``: ``"default"`` (the target's own value), ``"none"`` (never apart) or a positive int.

    Example:
        >>> long_rows_arg("default"), long_rows_arg("none"), long_rows_arg("64")
        ('default', None, 64)
    """
    return word_or_positive_int(text, "default")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--help``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="CPU run of the same code path on a tiny float32 model")
    ap.add_argument(
        "--model",
        default="qwen3-8b",
        choices=("qwen3-8b", "qwen3.5-4b", "smollm2-pair"),
        help="dense Qwen3-8B shape, the Qwen3.5-4B hybrid shape (Gated DeltaNet + attention), "
        "or the real SmolLM2-135M-Instruct with its trained DFlash drafter (held-out HumanEval prompts, real acceptance)",
    )
    ap.add_argument("--concurrency", default="1,4,16,24")
    ap.add_argument("--requests", type=int, default=24, help="prompts; concurrency 1 decodes each alone (the reference)")
    ap.add_argument(
        "--prompt-len", type=int, default=None, help="random prompts' mean length (default 128; not for smollm2-pair)"
    )
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument(
        "--waves",
        type=int,
        default=1,
        help="at concurrency c > 1, decode waves x c requests through the c slots (continuous batching; 1 = one closed batch)",
    )
    ap.add_argument(
        "--profile",
        default=None,
        choices=sorted(PRESETS),
        help="simulated acceptance (default specpilot-one-level; not for smollm2-pair)",
    )
    ap.add_argument("--tree-budget", type=int, default=16, help="smollm2-pair: nodes of the trained drafter's best-first tree")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument(
        "--matmul-precision",
        default="highest",
        choices=("highest", "high"),
        help="float32 matmuls: 'highest' (IEEE float32) or 'high' (TF32 tensor cores; torch.set_float32_matmul_precision)",
    )
    ap.add_argument(
        "--weights",
        default=None,
        choices=("random", "planted"),
        help="random weights (default), or random weights with a planted successor rule (a greedy continuation no rounding "
        "moves); not for smollm2-pair, whose weights are real",
    )
    ap.add_argument(
        "--layouts",
        default="packed,per_request",
        help="comma-separated layouts to run: packed (the engine's), per_request (the layout ablation)",
    )
    ap.add_argument("--no-graphs", action="store_true", help="packed target on the eager static path, no CUDA graphs")
    ap.add_argument(
        "--max-pass-rows",
        default="auto",
        type=pass_rows_arg,
        help="the Engine's cap on the rows of one target forward (chunked prefill): 'auto' (default: the target's "
        "largest row bucket where the engine can hold every forward within it), 'none', or an int",
    )
    ap.add_argument(
        "--split-forward",
        action="store_true",
        help="time each target forward between device syncs too: a pass split into forward and the rest (host work)",
    )
    ap.add_argument("--wall-budget-s", type=float, default=140.0, help="start no new case past this many seconds")
    ap.add_argument(
        "--long-request-rows",
        default="default",
        type=long_rows_arg,
        help="dense packed target: 'default' (the target's rule: a tall request attends its own slot apart past "
        "LONG_REQUEST_ROWS rows and LONG_REQUEST_PADDING padded pairs), 'none' (always the padded SDPA), or an int",
    )
    ap.add_argument(
        "--elementwise",
        choices=("auto", "torch"),
        default="auto",
        help="the dense layers' element-wise work: Triton kernels on CUDA (auto) or the PyTorch references (torch; "
        "specdec.models.elementwise.elementwise_kernels)",
    )
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_engine.json"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 1 if an output that must equal AR does not. The smollm2-pair smoke run takes one CPU thread
    (two BLAS threads on a busy 2-core machine ran its 2-row matmuls ~50x slower than one); restored after."""
    args = parse_args(argv)
    threads = torch.get_num_threads()
    if args.smoke and args.model == "smollm2-pair":
        torch.set_num_threads(1)
    try:
        with elementwise_kernels(args.elementwise):
            return run(args)
    finally:
        torch.set_num_threads(threads)


def run(args: argparse.Namespace) -> int:
    """The cases of the parsed command line ``args``; writes the JSON and prints the summary table last."""
    pair = args.model == "smollm2-pair"
    if pair:
        for flag, value in (("--weights", args.weights), ("--profile", args.profile), ("--prompt-len", args.prompt_len)):
            if value is not None:
                raise ValueError(
                    f"{flag}: --model smollm2-pair runs the real SmolLM2-135M-Instruct weights, the trained drafter's real "
                    f"acceptance and held-out HumanEval prompts; expected no {flag}, got {value!r}"
                )
        if isinstance(args.tree_budget, bool) or args.tree_budget < 1:
            raise ValueError(f"--tree-budget: expected an int >= 1, got {args.tree_budget!r}")
    args.weights = args.weights or "random"
    args.profile = args.profile or "specpilot-one-level"
    args.prompt_len = 128 if args.prompt_len is None else args.prompt_len
    t_start = time.perf_counter()
    torch.set_float32_matmul_precision(args.matmul_precision)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    hybrid = args.model == "qwen3.5-4b"
    if pair:  # the config comes with the checkpoint
        cfg, dtype = None, getattr(torch, args.dtype) if cuda else torch.float32
    elif hybrid:
        cfg, dtype = (QWEN3_5_4B, getattr(torch, args.dtype)) if cuda else (TINY_HYBRID, torch.float32)
    else:
        cfg, dtype = (QWEN3_8B, getattr(torch, args.dtype)) if cuda else (TINY, torch.float32)
    if args.smoke and pair:  # the real 135M model on the CPU: two prompts cut to their last 32 tokens, a few new tokens
        args.concurrency, args.requests, args.new_tokens, args.layouts = "1,2", 2, 6, "packed"
    elif args.smoke:
        args.concurrency, args.requests, args.prompt_len, args.new_tokens = "1,2,4", 4, 8, 8
        if hybrid:  # prompts of 56-88 tokens: prefills past the 64 rows of the batched GDN call run their own, as on the GPU
            args.prompt_len = 72
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.waves < 1:
        raise ValueError(f"--waves: expected an int >= 1, got {args.waves}")
    layouts = tuple(args.layouts.split(","))
    if not layouts or not set(layouts) <= {"packed", "per_request"}:
        raise ValueError(f"--layouts: expected a comma-separated subset of packed,per_request, got {args.layouts!r}")
    if max(levels) > args.requests:
        raise ValueError(f"--requests: expected at least the largest concurrency {max(levels)}, got {args.requests}")
    if pair:
        base, trained, prompts, max_seq_len = load_pair(
            args.requests, args.new_tokens, args.tree_budget, dtype=dtype, device=device, prompt_tail=32 if args.smoke else None
        )
        cfg, k, profile = base.config, trained.max_draft_tokens, None
        lengths = [p.numel() for p in prompts]
        prefix_len = round(sum(lengths) / len(lengths))
        systems = pair_systems(trained, base, tree_budget=args.tree_budget, slots=max(levels), max_context=max_seq_len)
    else:
        profile = PRESETS[args.profile]
        k = profile.num_drafts
        spread = min(16, args.prompt_len // 4)  # prompt lengths prompt_len +- spread
        max_seq_len = args.prompt_len + spread + args.new_tokens + k + 8
        prefix_len = args.prompt_len
    slots = max(levels)
    if hybrid:
        cache = hybrid_cache_bytes(cfg, dtype, slots, max_seq_len)
        kv = cache["kv"]
    else:
        kv = kv_bytes(cfg, dtype, slots, max_seq_len)
    if cuda and not hybrid:
        free, _ = torch.cuda.mem_get_info(device)
        weights = 2 * cfg.vocab_size * cfg.hidden_size * 2 + cfg.num_layers * 12 * cfg.hidden_size**2 * 2  # rough
        if 2 * kv + weights > free:
            raise ValueError(
                f"--concurrency: {slots} slots x {max_seq_len} tokens need {2 * kv / 1e9:.1f} GB of KV, {free / 1e9:.1f} GB free"
            )
    print(f"KV per layout: {slots} slots x {max_seq_len} tokens = {kv / 1e9:.3f} GB", flush=True)
    if hybrid:
        print(f"GDN states per layout: {slots} slots x 2 ring entries = {cache['gdn_states'] / 1e9:.3f} GB", flush=True)

    torch.manual_seed(0)
    if pair:
        pass  # loaded above, with its prompts
    elif hybrid:
        base = random_hybrid_target(cfg, dtype=dtype, device=device, max_seq_len=max_seq_len, seed=0, state_slots=2)
        if cuda:  # both layouts' caches, beside the weights already on the device
            free, _ = torch.cuda.mem_get_info(device)
            packed_cache = hybrid_cache_bytes(cfg, dtype, slots, max_seq_len, packed=True)
            need = cache["kv"] + cache["gdn_states"] + packed_cache["kv"] + packed_cache["gdn_states"]
            if need > free:
                raise ValueError(
                    f"--concurrency: {slots} slots x {max_seq_len} tokens need {need / 1e9:.1f} GB of KV and GDN states "
                    f"for two layouts, {free / 1e9:.1f} GB free"
                )
    else:
        base = DenseTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device).eval().requires_grad_(False)
    successor = plant_successor_rule(base) if args.weights == "planted" and not pair else None
    if not pair:
        gen = torch.Generator().manual_seed(0)
        lengths = torch.randint(args.prompt_len - spread, args.prompt_len + spread + 1, (args.requests,), generator=gen).tolist()
        prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).to(device) for n in lengths]
    eos = (list(base.config.eos_token_ids) or None) if pair else None
    if pair:
        model = "smollm2-135m-instruct + dflash"
    else:
        model = ("qwen3.5-4b" if cuda else "tiny-hybrid") if hybrid else ("qwen3-8b" if cuda else "tiny")
    result = dict(
        model=model,
        dtype=str(dtype),
        float32_matmul_precision=args.matmul_precision,
        weights="real" if pair else args.weights,
        device=str(device),
        label="real acceptance (trained DFlash drafter, n-gram)" if pair else OracleDrafter.label,
        profile=None if pair else args.profile,
        profile_source=None if pair else profile.source,
        profile_tokens_per_round=None if pair else profile.tokens_per_round,
        num_draft_tokens=k,
        max_pass_rows_arg=args.max_pass_rows,
        elementwise=args.elementwise,
        prompt_lengths=lengths,
        new_tokens=args.new_tokens,
        waves=args.waves,
        kv_bytes_per_layout=kv,
        rows=[],
        skipped=[],
    )
    if hybrid:
        result["gdn_state_bytes_per_layout"] = cache["gdn_states"]
    if pair:
        result.update(
            target="SmolLM2-135M-Instruct (specdec.data.smollm2_target), greedy, each request stops at EOS",
            drafter=f"trained DFlash drafter {data.smollm2_drafter_path().name} ({type(trained).__name__}, block {trained.block_size})",
            prompts=f"HumanEval 0..{args.requests - 1}, chat template (held out from the drafter's training: 0..39)",
            eos_token_ids=eos,
            tree_budget=args.tree_budget,
            systems={
                name: dict(verifier=make_verifier().__class__.__name__, num_draft_tokens=n, batched_drafting=batched)
                for name, (_, make_verifier, n, batched) in systems.items()
            },
            drafting={
                "trained": "batched (Engine batched_drafting=True, BatchedBlockDrafter): one feature ingestion and one "
                "block forward a round for all requests, as one CUDA graph replay (static path on the CPU); "
                "'batched eager': the same without graphs; 'drafts per request': one eager block forward per request a round",
                "n-gram": "per request (no forward to batch)",
            },
            equality=(
                "float32: every speculative output must equal batched AR (torch.equal; exit 1 otherwise). bf16: "
                "mismatches vs batched AR and vs alone are counted, not failed on: a verify pass of other row "
                "counts rounds differently and real weights have near-ties that may flip"
            ),
        )
    out_path = Path(args.out)
    failed = False

    def over_budget(case: str) -> bool:
        if time.perf_counter() - t_start > args.wall_budget_s:
            result["skipped"].append(case)
            print(f"skipped (wall budget {args.wall_budget_s} s): {case}", flush=True)
            return True
        return False

    targets: dict[str, RaggedDenseTarget | RaggedHybridTarget] = {}

    def target_of(layout: str) -> RaggedDenseTarget | RaggedHybridTarget:
        """One ragged target per layout; a packed one replays CUDA graphs (the static path on CPU)."""
        if layout not in targets:
            if hybrid:
                ragged = RaggedHybridTarget(base, slots=slots, max_seq_len=max_seq_len, layout=layout)
                if layout == "packed":
                    result["graphs"] = enable_graphs(ragged, cuda, args.no_graphs)
            else:
                ragged = RaggedDenseTarget(base, slots=slots, max_seq_len=max_seq_len, layout=layout)
                if args.long_request_rows != "default":
                    ragged.long_request_rows = args.long_request_rows
                result["long_request_rows"] = ragged.long_request_rows
                if layout == "packed":
                    result["graphs"] = enable_graphs(ragged, cuda, args.no_graphs)
            targets[layout] = ragged
        return targets[layout]

    def oracle_factory(references):
        made = iter(range(len(references)))

        def oracle():
            i = next(made)
            return OracleDrafter(profile, references=list(references[i]), vocab_size=cfg.vocab_size, seed=i)

        return oracle

    # the reference: every request alone (concurrency 1, batched AR on the packed engine), untimed
    t0 = time.perf_counter()
    alone = decode(
        target_of("packed"),
        prompts,
        concurrency=1,
        drafter=NGramDrafter(),
        num_draft_tokens=0,
        max_new_tokens=args.new_tokens,
        eos_token_id=eos,
        max_pass_rows=args.max_pass_rows,
    )["tokens"]
    result["alone_reference_s"] = time.perf_counter() - t0
    if successor is not None:
        result["alone_equal_to_planted_chain"] = all(
            torch.equal(t, successor_chain(successor, int(p[-1]), t.numel())) for p, t in zip(prompts, alone)
        )
        failed = failed or not result["alone_equal_to_planted_chain"]
        print(f"alone outputs follow the planted chain: {result['alone_equal_to_planted_chain']}", flush=True)
    print(
        f"alone reference: {len(prompts)} requests x {args.new_tokens} tokens in {result['alone_reference_s']:.1f} s", flush=True
    )
    tables: dict[tuple[str, int], StepTimeTable] = {}
    batched_ar: dict[tuple[str, int], list[torch.Tensor]] = {}
    for layout, c, name in cases(levels, layouts, tuple(systems) if pair else ("spec",)):
        if over_budget(f"{layout} c={c} {name}"):
            continue
        ragged = target_of(layout)
        # concurrency c: c slots kept busy by `waves` x c requests (prompts reused in turn), so the tail of the
        # last requests weighs 1 / waves of the run; concurrency 1 decodes every prompt once
        order = list(range(len(prompts))) if c == 1 else [i % len(prompts) for i in range(c * args.waves)]
        batch = [prompts[i] for i in order]
        if (layout, c) not in tables:
            tables[layout, c] = StepTimeTable.profile(
                ragged,
                rows=tuple(c * m for m in (1, 2, 4, 8, 16)),
                requests=c,
                prefix_len=prefix_len,
                reps=1 if args.smoke else 3,
                warmup=1,
            )
        table = tables[layout, c]
        # the budget weighs tokens against the time of a whole round: the forward's table plus the engine's
        # host work per round, taken from this layout's AR run at the same concurrency when it ran
        ar_done = next((r for r in result["rows"] if (r["layout"], r["concurrency"], r["system"]) == (layout, c, "AR")), None)
        host_ms = 0.0 if ar_done is None else max(0.0, ar_done["ms_per_pass"] - table(c))
        round_table = StepTimeTable(rows=table.rows, ms=tuple(m + host_ms for m in table.ms))
        system, budget = split_system(name)
        spec = system is not None
        if spec and (layout, c) not in batched_ar:
            batched_ar[layout, c] = decode(
                ragged,
                batch,
                concurrency=c,
                drafter=NGramDrafter(),
                num_draft_tokens=0,
                max_new_tokens=args.new_tokens,
                eos_token_id=eos,
                max_pass_rows=args.max_pass_rows,
            )["tokens"]
        # request i's oracle knows the continuations its target gives it: batched AR and alone (they differ
        # where bf16 rounding of other row counts flips a near-tie); the warm-up run adds this system's own
        refs = (
            [
                [torch.cat([p.cpu(), t]) for t in (batched_ar[layout, c][j], alone[i])]
                for j, (i, p) in enumerate(zip(order, batch))
            ]
            if spec and not pair
            else None
        )
        if pair and spec:
            drafter, make_verifier, num_drafts, batched_drafting = systems[system]
        else:
            make_verifier, num_drafts, batched_drafting = ChainVerifier, k if spec else 0, False

        def run_once(references):
            if not spec:
                drafter_of_run = NGramDrafter()
            elif pair:
                drafter_of_run = drafter
            else:
                drafter_of_run = oracle_factory(references)
            return decode(
                ragged,
                batch,
                concurrency=c,
                drafter=drafter_of_run,
                num_draft_tokens=num_drafts,
                verify_budget=budget if spec and budget else None,
                step_time=round_table if spec and budget else None,
                max_new_tokens=args.new_tokens,
                verifier=make_verifier(),
                batched_drafting=batched_drafting,
                eos_token_id=eos,
                max_pass_rows=args.max_pass_rows,
                split_forward=args.split_forward,
                kernel_profile_steps=kernel_profile_steps,
            )

        # untimed: captures this case's graphs and gives each request's own output; with --split-forward it also
        # profiles 5 of its steps (kernel time by category)
        kernel_profile_steps = 5 if args.split_forward else 0
        warm = run_once(refs)
        kernel_profile_steps = 0
        if refs is not None:
            refs = [[torch.cat([p.cpu(), t]), *r] for p, t, r in zip(batch, warm["tokens"], refs)]  # own output first
        run = run_once(refs)
        ar_tokens = run["tokens"] if not spec else batched_ar[layout, c]
        mismatches = sum(not torch.equal(t, alone[i]) for t, i in zip(run["tokens"], order))
        mismatches_ar = sum(not torch.equal(t, a) for t, a in zip(run["tokens"], ar_tokens))
        equal_ar = mismatches_ar == 0
        if (dtype == torch.float32 or successor is not None) and spec and not equal_ar:
            failed = True
        row = {key: v for key, v in run.items() if key != "tokens"}
        kp = warm.get("kernel_profile")
        if kp is not None:
            row["warmup_kernel_profile"] = kp
        if kp is not None and "kernels_ms" in kp:  # a CPU profile holds only the passes and captures
            print(
                f"[{layout:11s} c={c:2d}] {name:26s} warm-up kernels a step: {kp['kernels_ms']:.2f} ms "
                f"(gemm {kp['gemm_ms']:.2f}, attention {kp['attention_ms']:.2f}, other {kp['other_ms']:.2f}), "
                f"{kp['kernels_per_step']:.0f} launches",
                flush=True,
            )
        row.update(
            layout=layout,
            concurrency=c,
            requests=len(batch),
            system=name,
            equal_to_batched_ar=equal_ar,
            equal_to_warmup=all(torch.equal(t, w) for t, w in zip(run["tokens"], warm["tokens"])),
            warmup_unmatched_rounds=warm["unmatched_rounds"],
            mismatches_vs_alone=mismatches,
            mismatches_vs_batched_ar=mismatches_ar,
            step_time_ms=dict(rows=list(table.rows), ms=list(table.ms)),
            budget_host_ms_per_round=host_ms if spec and budget else None,
        )
        result["rows"].append(row)
        ar_row = next((r for r in result["rows"] if (r["layout"], r["concurrency"], r["system"]) == (layout, c, "AR")), None)
        row["speedup_vs_ar"] = None if ar_row is None else row["tokens_per_s"] / ar_row["tokens_per_s"]
        speedup = "  n/a" if row["speedup_vs_ar"] is None else f"{row['speedup_vs_ar']:5.2f}"
        print(
            f"[{layout:11s} c={c:2d}] {name:26s} {row['tokens_per_s']:9.1f} tok/s  x AR {speedup}  "
            f"acc/round {row['accepted_per_round']:5.2f}  passes {row['target_passes']:4d}  ms/pass {row['ms_per_pass']:6.2f}  "
            + (
                f"(forward {row['forward_ms_per_pass']:6.2f}, outside {row['outside_forward_ms_per_pass']:5.2f})  "
                if "forward_ms_per_pass" in row
                else ""
            )
            + f"cap {row['max_pass_rows']}  eager passes {row['eager_passes']}  prefill rows {row['prefill_rows']}  "
            f"unmatched {row['unmatched_rounds']}  mismatch vs alone {mismatches} vs AR {mismatches_ar}  = warm-up {row['equal_to_warmup']}",
            flush=True,
        )
        print("    passes by bucket: " + bucket_line(row["passes_by_bucket"]), flush=True)
        write_json(out_path, result, prov)  # after each case: a run cut short keeps what it measured
    result["plot"] = plot(result, out_path.with_suffix(".png"))
    result["wall_s"] = time.perf_counter() - t_start
    write_json(out_path, result, prov)
    print(f"\nwrote {out_path} ({result['plot']}); wall {result['wall_s']:.1f} s; skipped {result['skipped']}")
    print(f"layout       c   {'system':44s}    tok/s   x AR  lat med s  acc/round  mismatch/alone  mismatch/AR  =warm-up")
    for row in result["rows"]:
        print(
            f"{row['layout']:11s} {row['concurrency']:3d}  {row['system']:44s} {row['tokens_per_s']:8.1f}  "
            f"{'  n/a' if row['speedup_vs_ar'] is None else format(row['speedup_vs_ar'], '5.2f')}  "
            f"{row['latency_s_median']:9.3f}  {row['accepted_per_round']:9.2f}  {row['mismatches_vs_alone']:14d}  {row['mismatches_vs_batched_ar']:11d}  {row['equal_to_warmup']}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
