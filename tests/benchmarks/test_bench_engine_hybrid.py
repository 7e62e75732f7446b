"""The engine benchmark's hybrid path: its CPU smoke mode runs end to end on a planted tiny hybrid, and its cache bytes are real."""

import json

import torch

from benchmarks.decode import bench_engine
from specdec.models.hybrid import random_hybrid_target
from specdec.models.ragged_hybrid import RaggedHybridTarget


def test_hybrid_smoke_runs_both_layouts_and_every_output_equals_ar(tmp_path):
    out = tmp_path / "bench_engine_hybrid.json"
    argv = ["--smoke", "--model", "qwen3.5-4b", "--weights", "planted", "--wall-budget-s", "600", "--out", str(out)]
    assert bench_engine.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["model"] == "tiny-hybrid" and result["graphs"]["mode"] == "static_path"  # the bucketed body, eagerly
    assert result["alone_equal_to_planted_chain"] and result["skipped"] == []
    # prefills on both sides of the 64 rows a batched GDN call takes, as with the GPU run's 128-token prompts
    assert min(result["prompt_lengths"]) <= 64 < max(result["prompt_lengths"])
    assert {(r["layout"], r["concurrency"]) for r in result["rows"]} >= {("packed", 4), ("per_request", 4)}
    assert all(r["equal_to_batched_ar"] and r["mismatches_vs_alone"] == 0 for r in result["rows"])


def test_hybrid_cache_bytes_are_what_the_ragged_target_allocates():
    cfg = bench_engine.TINY_HYBRID
    hybrid = random_hybrid_target(cfg, dtype=torch.bfloat16, device="cpu", max_seq_len=12, state_slots=2)
    ragged = RaggedHybridTarget(hybrid, slots=3, max_seq_len=12, state_slots=2)

    def size(tensor):
        return tensor.numel() * tensor.element_size()

    expected = {
        "kv": sum(size(t) for t in ragged.k_caches + ragged.v_caches),
        "gdn_states": size(ragged.recurrent) + size(ragged.conv),
    }
    assert bench_engine.hybrid_cache_bytes(cfg, torch.bfloat16, slots=3, max_seq_len=12) == expected
    packed = RaggedHybridTarget(hybrid, slots=3, max_seq_len=12, state_slots=2, layout="packed")
    expected = {
        "kv": sum(size(t) for t in packed.k_caches + packed.v_caches),
        "gdn_states": size(packed.recurrent) + size(packed.conv),
    }
    assert bench_engine.hybrid_cache_bytes(cfg, torch.bfloat16, slots=3, max_seq_len=12, packed=True) == expected
