"""On a GPU: every block drafter's CUDA-graph draft step proposes exactly what its eager path does.

For DFlash, DFlash2 and DSpark (vanilla, gated and RNN heads), on a tiny float32 target on the GPU:
round by round over a growing context (1 .. k + 1 new rows per round, as verification commits them),
the eager drafter and the one with ``enable_cuda_graphs`` must propose the same tokens (and DSpark the
same confidences); greedy speculative decoding with both must give the same output; and one
graph-path propose must run under ``torch.cuda.set_sync_debug_mode("error")`` (no host sync).
Seconds of GPU time.

    python -m benchmarks.decode.check_drafter_graphs --out $OUT/check_drafter_graphs.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, write_json
from specdec.drafters import load_drafter
from specdec.drafters.block.fixtures import save_fixture
from specdec.testing import tiny_target
from specdec.verify.sampling import SamplingConfig

CASES = {
    "dflash": ("DFlashDraftModel", {}),
    "dflash2": ("DFlash2DraftModel", {}),
    "dspark-vanilla": ("Qwen3DSparkModel", {"markov_head_type": "vanilla"}),
    "dspark-gated": ("Qwen3DSparkModel", {"markov_head_type": "gated"}),
    "dspark-rnn": ("Qwen3DSparkModel", {"markov_head_type": "rnn"}),
}


def sync_free(drafter, target, prompt) -> str | bool:
    """A second propose (after one that ingests the prompt) under sync-debug "error"."""
    drafter.reset()
    greedy = SamplingConfig()
    layers = tuple(i + 1 for i in drafter.target_layer_ids)
    target.reset()
    hidden = target(prompt[None], hidden_layers=layers).hidden
    feats = torch.stack([h[0] for h in hidden], dim=1)  # [L, taps, H]
    target.reset()
    ctx = prompt
    drafter.propose(ctx[:-3], drafter.max_draft_tokens, sampling=greedy, generator=None, target_hidden=feats[:-4])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        drafter.propose(ctx, drafter.max_draft_tokens, sampling=greedy, generator=None, target_hidden=feats[-4:-1])
        return True
    except RuntimeError as exc:
        return f"host sync: {str(exc)[:200]}"
    finally:
        torch.cuda.set_sync_debug_mode("default")


def rounds_equal(eager, fast, target, prompt, gen) -> tuple[bool, int]:
    """Propose with both drafters over the same growing context; True if every round matches."""
    greedy = SamplingConfig()
    seq = torch.cat([prompt, sd.generate(target, prompt[None], 60).tokens[0]])
    layers = tuple(i + 1 for i in eager.target_layer_ids)
    target.reset()
    feats = torch.stack([h[0] for h in target(seq[None], hidden_layers=layers).hidden], dim=1)  # [L, taps, H]
    target.reset()
    eager.reset()
    fast.reset()
    last, L, rounds, same = 0, prompt.numel(), 0, True
    k = eager.max_draft_tokens
    while L <= seq.numel():
        # the newest token (the anchor) has no features yet: verification has not run on it
        a = eager.propose(seq[:L], k, sampling=greedy, generator=None, target_hidden=feats[last : L - 1])
        b = fast.propose(seq[:L], k, sampling=greedy, generator=None, target_hidden=feats[last : L - 1])
        same &= torch.equal(a.tokens, b.tokens)
        if getattr(eager, "last_confidence", None) is not None:
            same &= torch.allclose(eager.last_confidence, fast.last_confidence, rtol=1e-4, atol=1e-5)
        rounds += 1
        last, L = L - 1, L + int(torch.randint(1, k + 2, (1,), generator=gen))
    return same, rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: graphs cannot be captured here (the CPU tests cover the static path)")
        return 0
    device = "cuda"
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    target = tiny_target(seed=0, vocab_size=97, device=device, max_seq_len=256, num_layers=4)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 97, (n,), generator=gen).to(device) for n in (9, 17, 30)]
    rows, ok = {}, True
    with tempfile.TemporaryDirectory() as tmp:
        for name, (arch, kw) in CASES.items():
            folder = save_fixture(Path(tmp) / name, arch, target, seed=1, num_layers=2, **kw)
            eager, fast = load_drafter(folder, target), load_drafter(folder, target)
            fast.enable_cuda_graphs(target.max_seq_len)
            same, hist_same, rounds = True, True, 0
            for p in prompts:
                r_same, r = rounds_equal(eager, fast, target, p, gen)
                same &= r_same
                rounds += r
                a = sd.generate(target, p[None], 40, drafter=eager, num_draft_tokens=eager.max_draft_tokens)
                b = sd.generate(target, p[None], 40, drafter=fast, num_draft_tokens=fast.max_draft_tokens)
                hist_same &= torch.equal(a.tokens, b.tokens) and a.stats.accepted_histogram == b.stats.accepted_histogram
            sync = sync_free(fast, target, prompts[-1])
            rows[name] = {"proposals_equal": same, "rounds": rounds, "histograms_equal": hist_same, "no_host_sync": sync}
            ok &= same and hist_same and sync is True
            print(
                f"{name:16} proposals equal over {rounds} rounds: {same}  outputs/histograms equal {hist_same}  "
                f"no host sync {sync}",
                flush=True,
            )
    result = {"device": torch.cuda.get_device_name(), "cases": rows, "passed": ok}
    if args.out:
        write_json(args.out, result, prov)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
