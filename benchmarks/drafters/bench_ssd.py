"""Speculative speculation (SSD) at batch 1: plain speculative decoding, SSD without overlap, SSD with overlap, AR.

Question: does pre-drafting the next round while the target verifies (SSD / Saguaro) bring the round
ratio (speedup over AR / tokens per target pass; 0.64 for the DSpark block drafter on the H200) to 0.85,
and is the overlapped schedule >= 1.3x faster than the same schedule run in sequence?

Systems, greedy, chain verification, ``K`` drafts per round:

* ``ar``: plain autoregressive decoding;
* ``plain``: the base drafter proposing its block every round;
* ``ssd-seq-B``: :class:`SpeculativeSpeculationDrafter` over the same base with ``B`` pre-drafted
  continuations per round, the sequential transport (pre-draft, then verify: no overlap);
* ``ssd-overlap-B``: the same with the pre-draft job on a CUDA side stream while the target verifies
  (on the CPU a worker thread stands in: same job, same tokens).

Two modes:

``--shape qwen3-8b`` (default): a Qwen3-8B-shaped target with random bf16 weights and **simulated
acceptance**. The base is :class:`OracleSteps`: next-token scores whose argmax is the target's own
continuation (a verify-shape greedy reference, see ``bench_drafters.verify_shape_reference``) at each
position with probability ``alpha`` (the flat rate of the chosen :data:`~specdec.drafters.oracle.PRESETS`
profile); when it is wrong, the true token sits at rank ``2 + Geometric(runner_up)`` of the scores,
which is what the SSD outcome predictor's bonus guesses have to find. Its cost is the real block
drafter at its real shape (``bench_drafters.build_model``: 5 layers, Qwen3-8B taps, CUDA graphs on the
GPU): one drafter step (ingest 5 rows + block forward + head, as ``bench_drafters.time_draft`` times it)
runs for every block drafted, i.e. every step call that does not extend the previous one. The oracle
wrapper of :class:`~specdec.drafters.OracleDrafter` cannot be used as the SSD base (SSD asks its base
for next-token scores, which an oracle proposal does not carry), hence this adapter. Because
acceptance is a per-position draw, ``plain`` and both SSD systems propose the same tokens and see the
same accepted counts; they differ in time only. A short float32 case on a reduced-depth target (same
width and vocabulary) requires every system to equal AR (``torch.equal``); the bf16 timing runs record
whether they equal AR and whether the output followed the reference.

``--real``: SmolLM2-135M-Instruct (float32) with its trained DFlash drafter on held-out HumanEval
prompts. ``plain`` is the trained drafter with its target features; the SSD base is
:class:`BlockSteps`, the same drafter serving step scores one block forward per drafted block. A
pre-drafted continuation after outcome ``(k, bonus)`` is anchored at the bonus token with the features
verified before the round (the ``k`` accepted drafts and the bonus have none yet: the verification that
makes them is what runs meanwhile), placed right after the rows with features. Every system must equal AR.

Reported per system: tokens per target pass, ms per round, speedup over AR, round ratio, SSD cache hit
rate (hits / (hits + misses), cold starts apart), pre-drafts per round, and overlap over no-overlap.

    python -m benchmarks.drafters.bench_ssd --out $OUT/bench_ssd_sim.json              # GPU, 8B shape
    python -m benchmarks.drafters.bench_ssd --real --out $OUT/bench_ssd_real.json       # GPU, SmolLM2 pair
    python -m benchmarks.drafters.bench_ssd --smoke [--real]                            # CPU, tiny, same code path
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import math
import os
import signal
import sys
import time

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, write_json
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.oracle import PRESETS
from specdec.drafters.ssd import CudaStreamTransport, GeometricFanOut, SpeculativeSpeculationDrafter, ThreadTransport

T_START = time.perf_counter()
LISTED = 16  # tokens given a distinct score per position by OracleSteps (the truth's rank is capped here)


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T_START:6.1f}s] {msg}", flush=True)


WATCHDOG_S = 30.0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class OracleSteps:
    """Next-token scores with a chosen acceptance rate, at the cost of a real drafter (a ``Drafter``).

    Position ``p`` of ``reference`` (the target's greedy continuation) is drafted right with probability
    ``alpha``; when wrong, the truth is at rank ``2 + Geometric(runner_up)`` (capped at 16). Scores of a
    context that is not a prefix of the reference put one arbitrary token first. Everything is decided
    from host-side tables and one device comparison, so a call adds no host sync.

    ``propose(context, 1)`` returns ``tree_logprobs [1, V]`` (what SSD's base must give);
    ``propose(context, k > 1)`` returns the on-reference argmax tokens of positions ``n .. n + k - 1``
    (the plain system). ``cost()`` runs once per drafted block: for a ``k > 1`` proposal, and for a
    step call unless it extends the previous call by one token within ``block`` steps.

    Example:
        >>> d = OracleSteps(torch.tensor([1, 2, 3, 4, 5]), vocab_size=32, alpha=1.0, runner_up=0.5, block=3)
        >>> d.propose(torch.tensor([1, 2]), 2, sampling=SamplingConfig(), generator=None).tokens.tolist(), d.forwards
        ([3, 4], 1)
    """

    label = "simulated acceptance"

    def __init__(self, reference, *, vocab_size: int, alpha: float, runner_up: float, block: int, cost=None, seed: int = 0):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha: expected a rate in [0, 1], got {alpha!r}")
        if not 0.0 < runner_up <= 1.0:
            raise ValueError(f"runner_up: expected a probability in (0, 1], got {runner_up!r}")
        if vocab_size <= LISTED:
            raise ValueError(f"vocab_size: expected more than {LISTED} tokens, got {vocab_size}")
        self.vocab_size, self.block, self.cost = vocab_size, block, cost
        self.device = reference.device
        ref = reference.long().cpu().tolist()
        gen = torch.Generator().manual_seed(seed)
        right = (torch.rand(len(ref), generator=gen, dtype=torch.float64) < alpha).tolist()
        u = torch.rand(len(ref), generator=gen, dtype=torch.float64).tolist()
        on, off = [], []
        for p, truth in enumerate(ref):
            rank = 1 if right[p] else 2 + (0 if runner_up == 1.0 else int(math.log1p(-u[p]) / math.log1p(-runner_up)))
            rank = min(rank, LISTED)
            decoys = [(truth + i) % vocab_size for i in range(1, LISTED)]
            on.append(decoys[: rank - 1] + [truth] + decoys[rank - 1 :])
            off.append([(p * 7919 + 1) % vocab_size])
        self.reference = reference.long().to(self.device)
        self.on_index = torch.tensor(on, dtype=torch.long, device=self.device)  # [L, LISTED], best first
        self.off_index = torch.tensor(off, dtype=torch.long, device=self.device)  # [L, 1]
        self.top = self.on_index[:, 0].contiguous()  # [L]
        self.values = torch.arange(LISTED, 0, -1, dtype=torch.float32, device=self.device)  # 16 .. 1
        self.right_rate = sum(right) / max(1, len(right))
        self.forwards = 0
        self.last_n, self.steps_in_block = -1, 0

    def reset(self) -> None:
        self.last_n, self.steps_in_block = -1, 0

    def charge_forward(self, n: int, step: bool) -> None:
        if not step or n != self.last_n + 1 or self.steps_in_block >= self.block:
            self.forwards += 1
            self.steps_in_block = 0
            if self.cost is not None:
                self.cost()
        self.steps_in_block += 1
        self.last_n = n

    def score_row(self, index: torch.Tensor) -> torch.Tensor:
        row = torch.full((self.vocab_size,), -30.0, device=self.device)
        return row.scatter_(0, index, self.values[: index.numel()])

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        n = context.numel()
        self.charge_forward(n, step=max_tokens == 1)
        limit = self.reference.numel()
        if max_tokens != 1:
            k = max(0, min(int(max_tokens), self.block, limit - n))
            return DraftProposal(tokens=self.top[n : n + k].clone())
        if n >= limit:
            scores = self.score_row(torch.tensor([n % self.vocab_size], device=self.device))
        else:
            on_ref = (context == self.reference[:n]).all()
            scores = torch.where(on_ref, self.score_row(self.on_index[n]), self.score_row(self.off_index[n]))
        scores = torch.log_softmax(scores, -1)
        return DraftProposal(tokens=scores.argmax().view(1), tree_logprobs=scores[None])


class BlockSteps:
    """A feature-conditioned block drafter serving next-token scores, one block forward per drafted block.

    A step call that extends the previous one by a token (within the block) reads the next row of the
    block already drafted; any other call drafts a new block anchored at the context's last token. The
    drafter holds features of ``F`` rows (:meth:`ingest`); a context longer than ``F + 1`` (a pre-draft
    after an outcome whose accepted drafts and bonus have no features yet) is drafted as
    ``context[:F] + context[-1:]``: the anchor placed right after the rows with features.

    Example:
        >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> steps = BlockSteps(DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target))
        >>> steps.reset(); steps.propose(torch.tensor([5, 6, 7]), 1, sampling=SamplingConfig(), generator=None).tree_logprobs.shape
        torch.Size([1, 97])
    """

    def __init__(self, drafter):
        self.drafter = drafter
        self.vocab_size = drafter.vocab_size
        self.block = drafter.max_draft_tokens
        self.forwards = 0
        self.block_rows: torch.Tensor | None = None
        self.anchor = -1
        self.last_n = -1

    def reset(self) -> None:
        self.drafter.reset()
        self.block_rows, self.anchor, self.last_n = None, -1, -1

    def ingest(self, context: torch.Tensor, target_hidden: torch.Tensor | None) -> None:
        """Take the target features ``[r, taps, H]`` of the rows committed since the last call (a zero-token proposal)."""
        self.drafter.propose(context, 0, sampling=SamplingConfig(), generator=None, target_hidden=target_hidden)
        self.block_rows, self.last_n = None, -1

    @torch.no_grad()
    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        if max_tokens != 1:
            raise ValueError(f"max_tokens: BlockSteps serves one-token steps, got {max_tokens!r}")
        n = context.numel()
        if self.block_rows is None or n != self.last_n + 1 or n - self.anchor >= self.block:
            featured = self.drafter.cache.length
            anchored = context if n <= featured + 1 else torch.cat([context[:featured], context[-1:]])
            proposal = self.drafter.propose(anchored, self.block, sampling=SamplingConfig(), generator=None)
            self.block_rows = proposal.tree_logprobs
            self.anchor = n
            self.forwards += 1
        self.last_n = n
        scores = self.block_rows[n - self.anchor]
        return DraftProposal(tokens=scores.argmax().view(1), tree_logprobs=scores[None])


class FeatureForwarding:
    """Gives an SSD drafter over :class:`BlockSteps` the target features ``generate`` hands a drafter with taps."""

    def __init__(self, ssd: SpeculativeSpeculationDrafter, steps: BlockSteps):
        self.ssd, self.steps = ssd, steps
        self.vocab_size = ssd.vocab_size
        self.target_layer_ids = steps.drafter.target_layer_ids

    @property
    def stats(self):
        return self.ssd.stats

    def reset(self) -> None:
        self.ssd.reset()

    def propose(self, context, max_tokens, *, sampling, generator, target_hidden=None) -> DraftProposal:
        self.ssd.peek(context, sampling)  # the pre-draft job in flight is done before the drafter's cache changes
        self.steps.ingest(context, target_hidden)
        return self.ssd.propose(context, max_tokens, sampling=sampling, generator=generator)


def drafter_inputs(drafter, target, prefix: int):
    """A random context ``[prefix]`` and target features ``[prefix - 1, taps, H]`` for timing a drafter step."""
    g = torch.Generator(device=target.device).manual_seed(9)
    ctx = torch.randint(0, target.vocab_size, (prefix,), device=target.device, generator=g)
    shape = (prefix - 1, len(drafter.target_layer_ids), target.config.hidden_size)
    return ctx, torch.randn(shape, device=target.device, dtype=target.dtype, generator=g)


def fan_out_policy(name: str, budget: int):
    """``B`` continuations per round: the capped geometric split (online estimates) or the uniform one."""
    return GeometricFanOut(budget) if name == "geometric" else budget


OVERLAP_ON_CUDA = "stream"


def overlap_transport(device: torch.device):
    """The overlapped systems' transport: a CUDA side stream on a worker thread, or (``--overlap-transport
    thread``, and on the CPU) the worker thread alone, its kernels on the thread's default stream."""
    return CudaStreamTransport(device) if device.type == "cuda" and OVERLAP_ON_CUDA == "stream" else ThreadTransport()


def timed_generate(target, prompt, n, **kw):
    sync(target.device)
    t0 = time.perf_counter()
    out = sd.generate(target, prompt, n, **kw)
    sync(target.device)
    return out, time.perf_counter() - t0


def ssd_stats(drafter, rounds: int) -> dict:
    s = drafter.stats
    return {
        "hit_rate": s.hit_rate,
        "hits": s.hits,
        "misses": s.misses,
        "cold_starts": s.cold_starts,
        "predrafts_per_round": s.predrafts / max(1, rounds),
        "predraft_ms_per_round": s.predraft_s * 1e3 / max(1, rounds),
        "backup_ms_per_round": s.backup_s * 1e3 / max(1, rounds),
        "backups": dict(s.backups),
    }


def summarise(rows: dict) -> None:
    """Ratios against AR and overlap over no-overlap, in place."""
    ar = rows.get("ar")
    for name, row in rows.items():
        if ar is None or name == "ar" or "seconds" not in row:
            continue
        row["speedup_over_ar"] = ar["seconds"] / row["seconds"]
        row["round_ratio"] = row["speedup_over_ar"] / row["tokens_per_pass"]
        if name.startswith("ssd-overlap-"):
            seq = rows.get(name.replace("ssd-overlap-", "ssd-seq-"))
            if seq is not None and "seconds" in seq:
                row["overlap_over_no_overlap"] = seq["seconds"] / row["seconds"]
            if "plain" in rows and "seconds" in rows["plain"]:
                row["speedup_over_plain"] = rows["plain"]["seconds"] / row["seconds"]


def print_table(title: str, rows: dict) -> None:
    print(f"\n{title}")
    print(f"{'system':<18}{'tok/pass':>9}{'ms/round':>9}{'x AR':>7}{'ratio':>7}{'hit':>6}{'ovl/seq':>8}{'x plain':>8}  equal AR")
    for name, r in rows.items():
        if "seconds" not in r:
            print(f"{name:<18}  {r.get('skipped', r.get('error', '?'))}")
            continue

        def f(key, fmt):
            v = r.get(key)
            return format(v, fmt) if isinstance(v, (int, float)) else "-".rjust(int(fmt.split(".")[0]))

        print(
            f"{name:<18}{f('tokens_per_pass', '9.2f')}{f('round_ms', '9.2f')}{f('speedup_over_ar', '7.2f')}"
            f"{f('round_ratio', '7.3f')}{f('hit_rate', '6.2f')}{f('overlap_over_no_overlap', '8.2f')}"
            f"{f('speedup_over_plain', '8.2f')}  {r.get('equal_to_ar')}"
        )


def run_systems(
    target, prompt, new_tokens, k, fan_outs, make_plain, make_ssd, *, budget_s, warm_tokens, strict, reference=None, on_row=None
):
    """AR, plain, then per fan-out SSD sequential and overlapped; each after a warm-up call.

    With ``reference [L]`` (prompt + the continuation the oracle drafts from), each row records whether
    its output followed it (when not, the simulated acceptance did not hold past the first difference).
    """
    rows = {}
    ar = None
    systems = [("ar", None), ("plain", make_plain)]
    # every sequential system before any overlapped one: the side-stream path is the one not yet run on a GPU
    systems += [(f"ssd-seq-{b}", lambda b=b: make_ssd(b, "sequential")) for b in fan_outs]
    systems += [(f"ssd-overlap-{b}", lambda b=b: make_ssd(b, "overlap")) for b in fan_outs]
    for name, make in systems:
        if time.perf_counter() - T_START > budget_s:
            rows[name] = {"skipped": "wall-time budget"}
            log(f"{name}: skipped (budget)")
            continue
        # a system past the watchdog prints every thread's stack once and keeps running (the runner's cap kills)
        faulthandler.dump_traceback_later(WATCHDOG_S, repeat=False)
        kw = {} if make is None else None
        if make is not None:
            timed_generate(target, prompt, warm_tokens, drafter=make(), num_draft_tokens=k)  # warm-up
            drafter = make()
            kw = dict(drafter=drafter, num_draft_tokens=k)
        else:
            timed_generate(target, prompt, warm_tokens)
        out, secs = timed_generate(target, prompt, new_tokens, **kw)
        faulthandler.cancel_dump_traceback_later()
        st = out.stats
        rounds = max(1, st.target_passes - 1)
        row = {
            "seconds": secs,
            "new_tokens": int(st.new_tokens),
            "rounds": rounds,
            "tokens_per_pass": st.new_tokens / rounds,
            "round_ms": secs * 1e3 / rounds,
            "draft_s": st.draft_s,
            "verify_s": st.verify_s,
        }
        if ar is None:
            ar = out
            row["equal_to_ar"] = True
        else:
            row["equal_to_ar"] = bool(torch.equal(out.tokens.cpu(), ar.tokens.cpu()))
            if strict and not row["equal_to_ar"]:
                # recorded, not raised: the timing runs after it still run; main() exits non-zero
                log(f"{name}: MISMATCH, output differs from AR in float32 (must be exact)")
        if reference is not None:
            tail = reference[prompt.shape[1] :][: out.tokens.shape[1]].cpu()
            same = out.tokens[0].cpu()[: tail.numel()] == tail
            row["follows_reference"] = bool(same.all())
            row["first_off_reference"] = None if row["follows_reference"] else int((~same).nonzero()[0, 0])
        base = getattr(getattr(kw.get("drafter"), "ssd", kw.get("drafter")), "base", kw.get("drafter"))
        if hasattr(base, "forwards"):
            row["block_forwards_per_round"] = base.forwards / rounds
        if name.startswith("ssd"):
            row.update(ssd_stats(kw["drafter"], rounds))
        rows[name] = row
        log(f"{name}: {row['tokens_per_pass']:.2f} tok/pass, {row['round_ms']:.2f} ms/round, equal to AR {row['equal_to_ar']}")
        if on_row is not None:
            on_row(rows)
    summarise(rows)
    return rows, ar


def sim_mode(args, prov) -> dict:
    from benchmarks.decode.bench_drafters import DRAFTERS, QWEN3_MASK, TAPS, build_model, verify_shape_reference
    from specdec.models import QWEN3_8B, TargetConfig, random_target

    profile = PRESETS[args.profile]
    if len(set(profile.conditional)) != 1:
        raise ValueError(f"profile: expected a flat profile (one rate at every depth), got {profile.conditional}")
    alpha, k = profile.conditional[0], profile.num_drafts
    fan_outs = [int(b) for b in args.fan_outs.split(",")]
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        cfg, taps, mask = QWEN3_8B, TAPS, QWEN3_MASK
    else:
        cfg = TargetConfig(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16,
            qk_norm=True, model_type="qwen3",
        )  # fmt: skip
        taps, mask = [0, 1, 2], 511
    max_ctx = args.prefix + args.tokens + 4 * k + 64
    result = {
        "mode": "sim",
        "label": OracleSteps.label + ", random weights",
        "model": "qwen3-8b shape" if cuda else "tiny (smoke)",
        "device": str(device),
        "profile": args.profile,
        "profile_source": profile.source,
        "alpha": alpha,
        "runner_up": args.runner_up,
        "num_draft_tokens": k,
        "cost_drafter": args.drafter,
        "prefix": args.prefix,
        "new_tokens": args.tokens,
        "overlap_transport": ("cuda side stream" if OVERLAP_ON_CUDA == "stream" else "worker thread, default stream")
        if cuda
        else "worker thread (CPU stand-in)",
        "fan_out_policy": args.fan_out_policy,
        "target_graphs": args.target_graphs if cuda else "off",
        "drafter_graphs": args.drafter_graphs if cuda else "off",
    }
    gen = torch.Generator().manual_seed(0)

    def case(dtype, layers, strict, tokens, key):
        c = dataclasses.replace(cfg, num_layers=layers) if layers else cfg
        target = random_target(c, dtype=dtype, device=device, max_seq_len=max_ctx)
        if cuda and args.target_graphs == "on":
            target.enable_cuda_graphs(buckets=(1, 8))
        prompt = torch.randint(0, c.vocab_size, (1, args.prefix), generator=gen).to(device)
        cls = DRAFTERS[args.drafter][0]
        block = cls(build_model(args.drafter, target, [t for t in taps if t < c.num_layers] or [0], mask), target)
        if cuda and args.drafter_graphs == "on":
            block.enable_cuda_graphs(max_ctx)
        else:
            block.enable_static_cache(max_ctx)
        ctx, feats = drafter_inputs(block, target, args.prefix)
        block.reset()
        block.propose(ctx, block.max_draft_tokens, sampling=SamplingConfig(), generator=None, target_hidden=feats)

        def cost():
            block.cache.crop(args.prefix - 1 - 5)
            block.propose(ctx, block.max_draft_tokens, sampling=SamplingConfig(), generator=None, target_hidden=feats[-5:])

        for _ in range(3):  # graphs captured here, on the main thread, before any side-stream job runs
            cost()
        sync(device)
        reference = verify_shape_reference(target, prompt[0], tokens + 4 * k + 16, ())

        def make_steps():
            return OracleSteps(
                reference, vocab_size=c.vocab_size, alpha=alpha, runner_up=args.runner_up, block=k, cost=cost, seed=1
            )

        def make_ssd(b, transport):
            t = "sequential" if transport == "sequential" else overlap_transport(device)
            return SpeculativeSpeculationDrafter(make_steps(), fan_out=fan_out_policy(args.fan_out_policy, b), transport=t)

        rows, _ = run_systems(
            target,
            prompt,
            tokens,
            k,
            fan_outs,
            make_steps,
            make_ssd,
            budget_s=args.budget_s,
            warm_tokens=16,
            strict=strict,
            reference=reference,
            on_row=lambda rows: write_json(args.out, {**result, key: rows}, prov),  # partial results survive a kill
        )
        return rows

    # the timing case first: the measurement the goals are about
    result["timing_dtype"] = "bfloat16" if cuda else "float32"
    result["rows"] = case(torch.bfloat16 if cuda else torch.float32, 0, False, args.tokens, "rows")
    write_json(args.out, result, prov)
    if cuda:
        torch.cuda.empty_cache()  # the timing target's memory, freed when its case returned
    check_layers = args.check_layers if cuda else 2
    result["check_float32"] = {"layers": check_layers or cfg.num_layers}
    result["check_float32"]["rows"] = case(torch.float32, check_layers, True, args.check_tokens, "check_float32_rows")
    check_ok = all(r.get("equal_to_ar", True) for r in result["check_float32"]["rows"].values())
    log(f"float32 check: every system equal to AR: {check_ok}")
    return result


def real_mode(args, prov) -> dict:
    from specdec import data

    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    target = data.smollm2_target(device=device, max_seq_len=2048, progress=False)
    tok = data.smollm2_tokenizer()
    path = data.smollm2_drafter_path()
    fan_outs = [int(b) for b in args.fan_outs.split(",")]
    prompts = [data.chat_prompt_ids(tok, p).to(device) for p in data.humaneval_prompts(range(args.prompts))]
    k = args.k

    def make_plain():
        return sd.load_drafter(path, target)

    def make_ssd(b, transport):
        steps = BlockSteps(sd.load_drafter(path, target))
        t = "sequential" if transport == "sequential" else overlap_transport(device)
        return FeatureForwarding(
            SpeculativeSpeculationDrafter(steps, fan_out=fan_out_policy(args.fan_out_policy, b), transport=t), steps
        )

    result = {
        "mode": "real",
        "model": "SmolLM2-135M-Instruct float32 + trained DFlash drafter (block 8)",
        "device": str(device),
        "prompts": f"HumanEval 0..{args.prompts - 1} (held out from the drafter's training)",
        "new_tokens": args.tokens,
        "num_draft_tokens": k,
        "fan_out_policy": args.fan_out_policy,
        "overlap_transport": ("cuda side stream" if OVERLAP_ON_CUDA == "stream" else "worker thread, default stream")
        if cuda
        else "worker thread (CPU stand-in)",
        "per_prompt": [],
        "note": "SSD pre-drafts are anchored at the bonus token with the features verified before the round",
    }
    totals: dict = {}
    for i, prompt in enumerate(prompts):
        if i and time.perf_counter() - T_START > args.budget_s:
            log(f"budget reached: prompts {i}.. skipped")
            break
        # every system runs on a started prompt, so the totals compare the same prompts
        rows, _ = run_systems(
            target, prompt, args.tokens, k, fan_outs, make_plain, make_ssd, budget_s=float("inf"), warm_tokens=8, strict=True
        )
        result["per_prompt"].append(rows)
        for name, row in rows.items():
            if "seconds" not in row:
                continue
            t = totals.setdefault(name, dict(seconds=0.0, new_tokens=0, rounds=0, hits=0, misses=0, equal_to_ar=True))
            t["seconds"] += row["seconds"]
            t["new_tokens"] += row["new_tokens"]
            t["rounds"] += row["rounds"]
            t["hits"] += row.get("hits", 0)
            t["misses"] += row.get("misses", 0)
            t["equal_to_ar"] &= row["equal_to_ar"]
        log(f"prompt {i} done")
        write_json(args.out, result, prov)
    for name, t in totals.items():
        t["tokens_per_pass"] = t["new_tokens"] / max(1, t["rounds"])
        t["round_ms"] = t["seconds"] * 1e3 / max(1, t["rounds"])
        if name.startswith("ssd"):
            t["hit_rate"] = t["hits"] / max(1, t["hits"] + t["misses"])
    summarise(totals)
    result["prompts_run"] = len(result["per_prompt"])
    result["rows"] = totals
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (same code path)")
    ap.add_argument("--real", action="store_true", help="SmolLM2-135M with its trained drafter instead of the 8B shape")
    ap.add_argument("--shape", default="qwen3-8b", choices=("qwen3-8b",))
    ap.add_argument("--profile", default="dspark-qwen3-8b-gsm8k", help="a flat preset of specdec.drafters.oracle.PRESETS")
    ap.add_argument("--runner-up", type=float, default=0.5, help="P(the truth is the drafter's 2nd choice | 1st wrong)")
    ap.add_argument("--drafter", default="dspark-b7", help="block drafter whose forward is the cost (bench_drafters.DRAFTERS)")
    ap.add_argument("--fan-outs", default="2,8", help="SSD pre-draft budgets B to measure")
    ap.add_argument("--fan-out-policy", default="geometric", choices=("geometric", "uniform"))
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=None, help="new tokens per generate call (default 256, --real 64)")
    ap.add_argument("--check-layers", type=int, default=4, help="layers of the float32 check target (8B width on the GPU)")
    ap.add_argument("--check-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--k", type=int, default=7, help="drafts per round (--real)")
    ap.add_argument("--budget-s", type=float, default=100.0, help="start no new system past this wall time")
    ap.add_argument("--target-graphs", default="on", choices=("on", "off"), help="CUDA graphs for the target's steps (sim)")
    ap.add_argument("--drafter-graphs", default="on", choices=("on", "off"), help="CUDA graphs for the cost drafter (sim)")
    ap.add_argument(
        "--overlap-transport", default="stream", choices=("stream", "thread"), help="CUDA: side stream or thread only"
    )
    ap.add_argument("--watchdog-s", type=float, default=30.0, help="print every thread's stack when one system runs this long")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    # `timeout -s USR1` in the runner makes a run stuck past its cap print where every thread is
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    global WATCHDOG_S, OVERLAP_ON_CUDA
    WATCHDOG_S, OVERLAP_ON_CUDA = args.watchdog_s, args.overlap_transport
    if args.tokens is None:
        args.tokens = 64 if args.real else 256
    if args.smoke:
        args.budget_s = float("inf")  # every path runs, however slow the CPU
        if args.real:
            args.prompts, args.tokens, args.fan_outs = 1, 12, "2"
        else:
            args.prefix, args.tokens, args.check_tokens, args.fan_outs = 24, 24, 16, "2"
    mode = "real" if args.real else "sim"
    if args.out is None:
        args.out = os.path.join(os.environ.get("OUT", "."), f"bench_ssd_{mode}{'_smoke' if args.smoke else ''}.json")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    torch.manual_seed(0)
    result = real_mode(args, prov) if args.real else sim_mode(args, prov)
    exact_rows = result["check_float32"]["rows"] if "check_float32" in result else result["rows"]
    result["float32_all_equal_to_ar"] = all(r.get("equal_to_ar", True) for r in exact_rows.values())
    result["wall_s"] = time.perf_counter() - T_START
    path = write_json(args.out, result, prov)
    print(f"wrote {path}")
    if "check_float32" in result:
        print_table(f"float32 check ({result['check_float32']['layers']} layers)", result["check_float32"]["rows"])
    title = f"{result['mode']} {result.get('label', result.get('model'))} on {result['device']}"
    print_table(title + "  (goals: ratio >= 0.85, ovl/seq >= 1.3)", result["rows"])
    if not result["float32_all_equal_to_ar"]:
        print("FAILED: a float32 speculative output differs from AR")
        sys.exit(1)


if __name__ == "__main__":
    main()
