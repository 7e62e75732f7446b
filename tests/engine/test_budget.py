"""Global verify budget: the allocator against brute force, the step-time table, the estimator, the Engine option.

* :func:`allocate` reaches the brute-force optimum of expected tokens per unit of batch time, under a node cap
  and a row cap (hypothesis);
* the allocation of a round is decided before the round's target pass: changing that pass's logits
  does not change it (non-anticipating);
* with the budget on, every request's output in fp32 greedy is ``torch.equal`` to plain AR decoding;
* bad tables, gains and options raise naming the argument.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_drafters import TargetOracle

import specdec as sd
from specdec.contracts import DraftProposal
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.engine import Engine
from specdec.engine.budget import AcceptanceEstimator, StepTimeTable, allocate, chain_gains, expected_tokens_per_ms
from specdec.models.ragged import RaggedDenseTarget
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier

SEQ = 64
TARGET = tiny_target(seed=0, max_seq_len=SEQ)
DRAFT = tiny_target(seed=1, max_seq_len=SEQ)


def falling(values):
    return sorted(values, reverse=True)


gains_strategy = st.lists(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=0, max_size=4).map(falling), min_size=1, max_size=3
)
table_strategy = st.lists(st.floats(0.1, 5.0), min_size=2, max_size=4).map(
    lambda steps: StepTimeTable(rows=tuple(range(1, 4 * len(steps), 4)), ms=tuple(itertools.accumulate(steps)))
)


def brute_force(gains, *, base_tokens, fixed_rows, step_time, max_nodes, max_rows=None):
    best = None
    for counts in itertools.product(*(range(len(row) + 1) for row in gains)):
        if max_nodes is not None and sum(counts) > max_nodes:
            continue
        if max_rows is not None and fixed_rows + sum(counts) > max_rows:
            continue
        tokens = base_tokens + sum(sum(row[:n]) for row, n in zip(gains, counts))
        value = tokens / step_time(fixed_rows + sum(counts)) if step_time is not None else tokens
        best = value if best is None else max(best, value)
    return best


@settings(max_examples=150, deadline=None)
@given(
    gains=gains_strategy,
    table=table_strategy,
    base=st.integers(0, 4),
    fixed=st.integers(1, 6),
    cap=st.one_of(st.none(), st.integers(0, 8)),
    room=st.one_of(st.none(), st.integers(0, 8)),
    timed=st.booleans(),
)
def test_allocation_reaches_the_brute_force_optimum(gains, table, base, fixed, cap, room, timed):
    step_time = table if timed or (cap is None and room is None) else None
    max_rows = None if room is None else fixed + room  # a row cap: at most `room` nodes beside the fixed rows
    counts = allocate(gains, base_tokens=base, fixed_rows=fixed, step_time=step_time, max_nodes=cap, max_rows=max_rows)
    assert len(counts) == len(gains)
    assert all(0 <= n <= len(row) for n, row in zip(counts, gains))
    assert cap is None or sum(counts) <= cap
    assert max_rows is None or fixed + sum(counts) <= max_rows
    got = expected_tokens_per_ms(gains, counts, base_tokens=base, fixed_rows=fixed, step_time=step_time)
    best = brute_force(gains, base_tokens=base, fixed_rows=fixed, step_time=step_time, max_nodes=cap, max_rows=max_rows)
    assert got == pytest.approx(best, rel=1e-12, abs=1e-12)


def ranked_allocation(gains, *, base_tokens, fixed_rows, step_time, max_nodes, max_rows):
    """The plain allocation: every node ranked by (-gain, request, depth), each total of the ranking scanned."""
    ranked = sorted((-g, r, j) for r, row in enumerate(gains) for j, g in enumerate(row))
    cap = len(ranked)
    if max_nodes is not None:
        cap = min(cap, max_nodes)
    if max_rows is not None:
        cap = min(cap, max_rows - fixed_rows)
    best_total, best_value, gained = 0, None, float(base_tokens)
    for total in range(cap + 1):
        if total:
            gained += -ranked[total - 1][0]
        value = gained / step_time(fixed_rows + total) if step_time is not None else gained
        if best_value is None or value > best_value:
            best_total, best_value = total, value
    counts = [0] * len(gains)
    for _, r, _ in ranked[:best_total]:
        counts[r] += 1
    return counts


@settings(max_examples=150, deadline=None)
@given(
    # few distinct values: equal gains across requests and equal objectives across totals are common
    gains=st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), max_size=5).map(falling), min_size=1, max_size=4),
    base=st.integers(0, 3),
    fixed=st.integers(1, 4),
    cap=st.one_of(st.none(), st.integers(0, 12)),
    room=st.one_of(st.none(), st.integers(0, 12)),
    timed=st.booleans(),
)
def test_allocation_equals_the_plain_ranking_ties_included(gains, base, fixed, cap, room, timed):
    flat = StepTimeTable(rows=(1, 4, 32), ms=(2.0, 2.0, 4.0))  # flat, then one row costs what 0.25 tokens bring
    step_time = flat if timed or (cap is None and room is None) else None
    kwargs = dict(
        base_tokens=base, fixed_rows=fixed, step_time=step_time, max_nodes=cap, max_rows=None if room is None else fixed + room
    )
    assert allocate(gains, **kwargs) == ranked_allocation(gains, **kwargs)


def test_allocation_spends_rows_where_gains_are_and_stops_where_time_outgrows_them():
    flat = StepTimeTable(rows=(1, 100), ms=(10.0, 10.0))
    assert allocate([[0.9, 0.9], [0.2]], base_tokens=2, fixed_rows=2, step_time=flat) == [2, 1]
    assert allocate([[0.9, 0.9], [0.2]], base_tokens=2, fixed_rows=2, max_nodes=2) == [2, 0]
    # a row costs 0.5 ms on a 10 ms step: 3.8 tokens / 11 ms beats 3.9 / 11.5 (the 0.1 node) and 2 / 10 (none)
    steep = StepTimeTable(rows=(2, 12), ms=(10.0, 15.0))
    assert allocate([[0.9, 0.9], [0.1]], base_tokens=2, fixed_rows=2, step_time=steep) == [2, 0]
    assert allocate([[0.9, 0.9], [0.2]], base_tokens=2, fixed_rows=2, step_time=steep) == [2, 1]


def test_step_time_table_interpolates_extrapolates_and_round_trips():
    table = StepTimeTable(rows=(4, 8, 16), ms=(2.0, 3.0, 7.0), meta={"model": "tiny"})
    assert [table(r) for r in (1, 4, 6, 8, 12, 16, 20)] == [2.0, 2.0, 2.5, 3.0, 5.0, 7.0, 9.0]
    again = StepTimeTable.from_json(table.to_json())
    assert again == table and again.meta == {"model": "tiny"}


def test_profile_times_the_ragged_forward_and_leaves_the_slots_empty():
    ragged = RaggedDenseTarget(TARGET, slots=3)
    table = StepTimeTable.profile(ragged, rows=(1, 6, 12), requests=3, prefix_len=8, reps=2, warmup=1)
    assert table.rows == (1, 6, 12) and len(table.meta["measured_ms"]) == 3
    assert all(b >= a for a, b in zip(table.ms, table.ms[1:])) and table.ms[0] > 0
    assert ragged.lengths == [0, 0, 0]
    with pytest.raises(ValueError, match="requests"):
        StepTimeTable.profile(ragged, rows=(1, 2), requests=4)
    with pytest.raises(ValueError, match="prefix_len"):
        StepTimeTable.profile(ragged, rows=(1, 64), prefix_len=60)


def test_profile_times_a_hybrid_ragged_target_in_either_layout():
    from specdec.models.ragged_hybrid import RaggedHybridTarget

    hybrid = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
    for layout in ("packed", "per_request"):
        ragged = RaggedHybridTarget(hybrid, slots=2, layout=layout)
        table = StepTimeTable.profile(ragged, rows=(2, 8), requests=2, prefix_len=8, reps=1, warmup=0)
        assert table.rows == (2, 8) and table.meta["layout"] == layout and table.ms[0] > 0
        assert ragged.lengths == [0, 0]
    with pytest.raises(TypeError, match="RaggedHybridTarget"):
        StepTimeTable.profile(hybrid, rows=(1, 2))


def test_estimator_learns_depth_acceptance_from_past_rounds_only():
    est = AcceptanceEstimator()
    chain = DraftProposal(torch.tensor([1, 2, 3]))
    before = est.gains(chain)
    assert before == est.gains(chain)  # reading gains changes nothing
    for _ in range(20):
        est.observe(chain, nodes=3, accepted=0)  # depth 1 always rejected
    after = est.gains(chain)
    assert after[0] < before[0] and after[0] == pytest.approx(1 / 22)
    assert est.reached[:1] == [20] and len(est.reached) == 1  # deeper depths were never reached
    for _ in range(40):
        est.observe(chain, nodes=3, accepted=3)
    assert est.gains(chain)[2] > after[2]


def test_estimator_calibrates_drafter_scores_online():
    probs = torch.full((2, 5), 0.1)
    probs[:, 1] = 0.6
    chain = DraftProposal(torch.tensor([1, 1]), draft_probs=probs)
    est = AcceptanceEstimator()
    assert est.gains(chain) == pytest.approx([0.6, 0.36])
    for _ in range(10):
        est.observe(chain, nodes=2, accepted=0)  # the drafter is overconfident
    scale = 1 / (1 + 10 * 0.96)
    assert est.gains(chain) == pytest.approx([0.6 * scale, 0.36 * scale])


def test_bad_budget_inputs_raise_naming_the_argument():
    table = StepTimeTable(rows=(1, 2), ms=(1.0, 2.0))
    with pytest.raises(ValueError, match="gains\\[0\\].*non-increasing"):
        allocate([[0.1, 0.5]], base_tokens=1, fixed_rows=1, step_time=table)
    with pytest.raises(ValueError, match="gains\\[1\\].*>= 0"):
        allocate([[0.5], [-0.1]], base_tokens=1, fixed_rows=1, step_time=table)
    with pytest.raises(TypeError, match="gains"):
        allocate("abc", base_tokens=1, fixed_rows=1, step_time=table)
    for bad in ([float("nan")], [1.0, float("nan")], [float("inf"), 1.0], [True], [0.5, "0.1"]):
        with pytest.raises(ValueError, match="gains\\[1\\]: expected finite gains >= 0"):
            allocate([[0.5], bad], base_tokens=1, fixed_rows=1, step_time=table)
    # ints and a negative zero are gains too
    assert allocate([[1, 0], [0.5, -0.0]], base_tokens=1, fixed_rows=1, max_nodes=2) == [1, 1]
    with pytest.raises(ValueError, match="fixed_rows"):
        allocate([[0.5]], base_tokens=1, fixed_rows=0, step_time=table)
    with pytest.raises(ValueError, match="step_time"):
        allocate([[0.5]], base_tokens=1, fixed_rows=1)
    with pytest.raises(ValueError, match="max_nodes"):
        allocate([[0.5]], base_tokens=1, fixed_rows=1, max_nodes=-1)
    with pytest.raises(ValueError, match="max_rows: expected None or an int >= fixed_rows = 3, got 2"):
        allocate([[0.5]], base_tokens=1, fixed_rows=3, max_rows=2)
    assert allocate([[0.5, 0.4]], base_tokens=1, fixed_rows=3, max_rows=4) == [1]  # max_rows alone bounds it
    with pytest.raises(ValueError, match="rows: expected strictly increasing"):
        StepTimeTable(rows=(2, 2), ms=(1.0, 1.0))
    with pytest.raises(ValueError, match="ms: expected times non-decreasing"):
        StepTimeTable(rows=(1, 2), ms=(2.0, 1.0))
    with pytest.raises(ValueError, match="ms: expected 2 times"):
        StepTimeTable(rows=(1, 2), ms=(1.0,))
    with pytest.raises(ValueError, match="verify_budget"):
        Engine(TARGET, NGramDrafter(), max_batch=2, verify_budget=-1)
    with pytest.raises(ValueError, match="verify_budget"):
        Engine(TARGET, NGramDrafter(), max_batch=2, verify_budget="all")
    with pytest.raises(ValueError, match="step_time: verify_budget='auto'"):
        Engine(TARGET, NGramDrafter(), max_batch=2, verify_budget="auto")
    with pytest.raises(ValueError, match="step_time: only read"):
        Engine(TARGET, NGramDrafter(), max_batch=2, step_time=table)
    with pytest.raises(TypeError, match="step_time"):
        Engine(TARGET, NGramDrafter(), max_batch=2, verify_budget=4, step_time=[1.0])


PROMPTS = [[5, 6, 7, 5, 6, 7, 5], [9, 3], [4, 4, 4, 4], [1, 2, 3, 1, 2, 3, 1, 2], [11]]
TABLE = StepTimeTable(rows=(1, 8, 32), ms=(1.0, 1.3, 4.0))


@pytest.mark.parametrize(
    "verifier, drafter, budget",
    [
        ("chain", "ngram", 3),
        ("chain", "model", 2),
        ("tree", "model", 5),
        ("tree", "model", "auto"),
        ("chain", "ngram", "auto"),
    ],
)
def test_outputs_with_a_global_budget_equal_ar_in_fp32_greedy(verifier, drafter, budget):
    make_verifier = ChainVerifier if verifier == "chain" else (lambda: TreeVerifier(budget=8))
    make_drafter = (lambda: NGramDrafter(max_ngram=2)) if drafter == "ngram" else (lambda: ModelDrafter(copy.deepcopy(DRAFT)))
    # one draft model holds one cache: with the model drafter, one request at a time
    engine = Engine(
        TARGET,
        NGramDrafter(max_ngram=2) if drafter == "ngram" else make_drafter,
        make_verifier(),
        max_batch=3 if drafter == "ngram" else 1,
        num_draft_tokens=4,
        verify_budget=budget,
        step_time=TABLE if budget == "auto" else None,
    )
    ids = [engine.add_request(torch.tensor(p), max_new_tokens=10) for p in PROMPTS]
    totals = []
    while engine.has_work:
        engine.step()
        totals.append(sum(engine.last_allocation.values()))
        if isinstance(budget, int):
            assert totals[-1] <= budget
    assert any(totals)  # the budget gave some rounds draft nodes
    outputs = {rid: engine.output(rid) for rid in ids}
    for rid, prompt in zip(ids, PROMPTS):
        ar = sd.generate(TARGET, torch.tensor([prompt]), max_new_tokens=10).tokens[0]
        assert torch.equal(outputs[rid], ar)


@pytest.mark.parametrize("budget", [3, "auto"])
def test_each_forward_holds_the_roots_and_the_nodes_the_budget_gave(budget):
    engine = Engine(
        TARGET,
        NGramDrafter(max_ngram=2),
        max_batch=3,
        num_draft_tokens=4,
        verify_budget=budget,
        step_time=TABLE if budget == "auto" else None,
    )
    for p in PROMPTS[:3]:
        engine.add_request(torch.tensor(p), max_new_tokens=10)
    engine.step()  # the prefills
    nodes = []
    while engine.has_work:
        engine.step()
        nodes.append(sum(engine.last_allocation.values()))
        assert engine.last_pass_rows == len(engine.last_allocation) + nodes[-1]
    assert any(n < 4 * 3 for n in nodes) and any(nodes)  # the budget cut some rounds short, and gave some nodes


def test_a_budget_of_zero_nodes_decodes_autoregressively():
    engine = Engine(TARGET, NGramDrafter(max_ngram=2), max_batch=2, verify_budget=0)
    ids = [engine.add_request(torch.tensor(p), max_new_tokens=6) for p in PROMPTS[:2]]
    engine.run()
    assert all(engine.request(rid).accepted == 0 and engine.request(rid).rounds == 5 for rid in ids)


def test_allocation_does_not_read_the_rounds_target_pass(monkeypatch):
    """Two runs that differ only in the logits of step s allocate identically at step s."""

    def allocations(perturb_step, steps=6):
        engine = Engine(TARGET, lambda: ModelDrafter(tiny_target(seed=1, max_seq_len=SEQ)), max_batch=3, verify_budget=4)
        for p in PROMPTS[:3]:
            engine.add_request(torch.tensor(p), max_new_tokens=12)
        ragged = engine.target
        forward = ragged.forward
        calls = {"n": 0}

        def perturbed(rows, **kwargs):
            outs = forward(rows, **kwargs)
            calls["n"] += 1
            if calls["n"] == perturb_step:
                for out in outs:
                    out.logits.copy_(torch.flip(out.logits, dims=[-1]))
            return outs

        monkeypatch.setattr(ragged, "forward", perturbed)
        seen = []
        for _ in range(steps):
            engine.step()
            seen.append(dict(engine.last_allocation))
        return seen

    plain, perturbed = allocations(perturb_step=0), allocations(perturb_step=4)
    assert perturbed[:4] == plain[:4]  # up to and including the perturbed step: the same decisions
    assert sum(perturbed[3].values()) == 4
    assert perturbed[4:] != plain[4:]  # later rounds do learn from the perturbed pass


def test_step_table_over_equals_each_call():
    table = StepTimeTable(rows=(3, 8, 9, 40), ms=(2.0, 2.5, 4.0, 4.0))
    for first in (1, 2, 3, 7, 9, 39, 41):
        assert table.over(first, 12) == [table(r) for r in range(first, first + 12)]
    assert StepTimeTable(rows=(5,), ms=(1.5,)).over(1, 3) == [1.5, 1.5, 1.5]
    assert table.over(4, 0) == []
    fresh = StepTimeTable(rows=(3, 8, 9, 40), ms=(2.0, 2.5, 4.0, 4.0))
    for first, count in ((30, 20), (1, 3), (2, 60), (45, 0), (7, 1)):  # the times worked out so far, in any order
        assert fresh.over(first, count) == [table(r) for r in range(first, first + count)]
    fresh.over(1, 3)[0] = -1.0  # the caller's own list
    assert fresh.over(1, 3) == [2.0, 2.0, 2.0] and fresh == table
    with pytest.raises(ValueError, match="first"):
        table.over(0, 2)
    with pytest.raises(ValueError, match="count"):
        table.over(1, -1)


def test_estimator_gives_unreached_depths_the_pooled_rate():
    """A budget that verified 3 nodes saw nothing deeper; depth 4 on takes what depths 1-3 showed, not the bare prior."""
    est = AcceptanceEstimator()
    chain = DraftProposal(torch.arange(8))
    for _ in range(30):
        est.observe(chain, nodes=3, accepted=3)  # every verified node accepted, depths 4+ never verified
    gains = est.gains(chain)
    own = [(30 + 1) / (30 + 2)] * 3
    pooled = (90 + 1) / (90 + 2)
    expected = [own[0], own[0] ** 2, own[0] ** 3] + [own[0] ** 3 * pooled**k for k in range(1, 6)]
    assert gains == pytest.approx(expected)
    assert gains[7] > 0.8  # the bare Beta(1, 1) prior would give 0.97^3 * 0.5^5 = 0.03


def test_a_request_borrows_the_pool_until_its_own_rounds_take_over():
    pool = AcceptanceEstimator()
    chain = DraftProposal(torch.arange(6))
    for _ in range(50):
        pool.observe(chain, nodes=6, accepted=6)  # the batch so far: every node accepted
    fresh = AcceptanceEstimator(pool=pool)
    lone = AcceptanceEstimator()
    assert fresh.gains(chain) == pytest.approx(pool.gains(chain))
    assert fresh.gains(chain)[5] > 0.8 > lone.gains(chain)[5]
    for _ in range(40):
        fresh.observe(chain, nodes=6, accepted=0)  # this request's drafter misses at once
    assert fresh.gains(chain)[0] < 0.1
    assert pool.reached[0] == 90  # its rounds fed the pool too


def test_a_request_reads_its_pool_as_it_is_now():
    """A request's gains follow its pool between its own rounds: asked before the pool learns, asked after, or only after."""
    chain = DraftProposal(torch.arange(4))

    def gains_after_the_pool_learns(ask_before: bool):
        pool = AcceptanceEstimator()
        request, companion = AcceptanceEstimator(pool=pool), AcceptanceEstimator(pool=pool)
        request.observe(chain, nodes=4, accepted=1)
        before = request.gains(chain) if ask_before else None
        for _ in range(10):
            companion.observe(chain, nodes=4, accepted=4)  # only the pool learns
        return before, request.gains(chain)

    before, after = gains_after_the_pool_learns(ask_before=True)
    assert after[3] > before[3]
    assert after == gains_after_the_pool_learns(ask_before=False)[1]


@settings(max_examples=60, deadline=None)
@given(
    rounds=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.integers(0, 9)), max_size=30),
    lengths=st.lists(st.integers(0, 9), min_size=4, max_size=4),
    pooled=st.booleans(),
)
def test_chain_gains_equal_each_estimators_own(rounds, lengths, pooled):
    """The gains of a round's requests worked out together equal each request's own, to the last bit."""
    pool = AcceptanceEstimator(prior_accept=2.0, prior_reject=0.5) if pooled else None
    estimators = [AcceptanceEstimator(pool=pool) for _ in range(3)] + [AcceptanceEstimator(prior_accept=0.3, prior_reject=3.0)]
    for who, nodes, accepted in rounds:
        estimators[who].observe(DraftProposal(torch.arange(9)), nodes=nodes, accepted=min(accepted, nodes))
    own = [est.gains(DraftProposal(torch.arange(n))) for est, n in zip(estimators, lengths)]
    assert chain_gains(estimators, lengths) == own
    with pytest.raises(ValueError, match="lengths"):
        chain_gains(estimators, lengths[:2])


def test_engine_requests_share_one_acceptance_pool():
    target = tiny_target(seed=0)
    table = StepTimeTable(rows=(1, 64), ms=(1.0, 2.0))
    engine = Engine(target, NGramDrafter(), max_batch=2, num_draft_tokens=3, verify_budget="auto", step_time=table)
    ids = [engine.add_request(torch.tensor(p), max_new_tokens=12) for p in ([1, 2, 3, 1, 2], [4, 5, 4, 5, 4])]
    engine.run()
    states = [engine.request(rid) for rid in ids]
    assert all(s.estimator.pool is engine.acceptance_pool for s in states)
    assert sum(engine.acceptance_pool.reached[:1]) == sum(s.estimator.reached[0] for s in states if s.estimator.reached)
    alone = Engine(target, NGramDrafter(), max_batch=2, verify_budget="auto", step_time=table, pooled_acceptance=False)
    assert alone.acceptance_pool is None
    with pytest.raises(TypeError, match="pooled_acceptance"):
        Engine(target, NGramDrafter(), max_batch=2, pooled_acceptance=1)
    with pytest.raises(TypeError, match="pool"):
        AcceptanceEstimator(pool=object())


def test_siblings_without_scores_share_their_depth_rather_than_each_taking_it():
    """At most one node a depth is accepted: three siblings gain p, (1 - p) p and (1 - p)^2 p, never 3 p."""
    from specdec.contracts import Tree

    est = AcceptanceEstimator()
    tree = Tree(tokens=torch.tensor([5, 6, 7]), parents=torch.tensor([-1, -1, -1]))
    proposal = DraftProposal(torch.tensor([5, 6, 7]))
    for _ in range(50):
        est.observe(proposal, nodes=3, accepted=1, tree=tree, path=[1])  # the second sibling accepted
    gains = est.gains(proposal, tree)
    p = gains[0]
    assert gains == pytest.approx([p, (1 - p) * p, (1 - p) ** 2 * p]) and sum(gains) <= 1.0
    chain = Tree(tokens=torch.tensor([5, 6, 7]), parents=torch.tensor([-1, 0, 1]))
    assert est.gains(proposal, chain) == est.gains(proposal)  # a chain: each depth's survival, as before


def test_a_tree_without_scores_learns_the_per_node_rate_its_gains_assume():
    """Each checked sibling up to the accepted one is a trial of its depth: simulated under the gains' own model (each
    child accepted with p, siblings in order), the learned rates are p at every depth and the gains sum to the mean."""
    import random

    from specdec.contracts import Tree

    p, rng = 0.5, random.Random(0)
    tree = Tree.from_paths([[5, 6, 7], [9]])  # a (depth 1), b, c below it, d a sibling of a
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(tree.parents.tolist()):
        children.setdefault(parent, []).append(node)
    proposal, est, lengths = DraftProposal(torch.tensor([5, 6, 7]), tree=tree), AcceptanceEstimator(), []
    for _ in range(20_000):
        path, node = [], -1
        while any(rng.random() < p and not path.append(child) for child in children.get(node, [])):
            node = path[-1]
        est.observe(proposal, nodes=4, accepted=len(path), tree=tree, path=path)
        lengths.append(len(path))
    assert est._rates(3) == pytest.approx([p] * 3, abs=0.02)
    assert sum(est.raw_gains(proposal, tree)[0]) == pytest.approx(sum(lengths) / len(lengths), abs=0.03)
    with pytest.raises(ValueError, match="path: expected the accepted nodes of a tree without scores, got None"):
        est.observe(proposal, nodes=4, accepted=1, tree=tree)
    with pytest.raises(ValueError, match=r"path: expected 2 checked nodes from the root on, each a child of the one before"):
        est.observe(proposal, nodes=4, accepted=2, tree=tree, path=[3, 1])


def test_scores_and_observed_counts_the_proposal_cannot_have_are_refused():
    est = AcceptanceEstimator()
    nan = DraftProposal(torch.tensor([1, 2, 3]), confidence=torch.tensor([float("nan"), 0.1, 0.05]))
    with pytest.raises(ValueError, match=r"expected probabilities in \[0, 1\], got \[nan\]"):
        est.gains(nan)
    chain = DraftProposal(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"scores: expected one a node \(3\), got 1"):
        est.gains(chain, scores=[0.5])
    with pytest.raises(ValueError, match="nodes: expected at most the 3 nodes of the proposal, got 7"):
        est.observe(chain, nodes=7, accepted=2)
    with pytest.raises(ValueError, match=r"accepted: expected at most the depth the checked nodes reach \(2\), got 3"):
        est.observe(chain, nodes=2, accepted=3)
    with pytest.raises(ValueError, match=r"counts\[0\]: expected an int in \[0, 1\]"):
        expected_tokens_per_ms([[0.5]], [5], base_tokens=0, fixed_rows=1, step_time=None)
    with pytest.raises(ValueError, match=r"counts: expected one count a request \(1\), got 2"):
        expected_tokens_per_ms([[0.5]], [1, 1], base_tokens=0, fixed_rows=1, step_time=None)
    with pytest.raises(ValueError, match="base_tokens: expected a finite number >= 0, got nan"):
        expected_tokens_per_ms([[0.5]], [1], base_tokens=float("nan"), fixed_rows=1, step_time=None)


def test_numpy_integers_are_taken_as_ints():
    import numpy as np

    assert allocate([[0.9, 0.8], [0.5]], base_tokens=2, fixed_rows=np.int64(2), max_nodes=np.int64(2)) == [2, 0]


def test_a_drafter_that_learns_acceptance_hears_where_a_verify_budget_cut_its_round():
    """With the target's own weights every verified draft is accepted (T = 1): a budget that verifies 2 of 4 drafts
    must not read as a rejection after them."""
    from specdec.drafters import ModelDrafter, SpeculativeSpeculationDrafter
    from specdec.drafters.ssd import GeometricFanOut
    from specdec.testing import tiny_target

    target = tiny_target(seed=0)
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)), fan_out=GeometricFanOut(6))
    engine = Engine(target, drafter, max_batch=1, num_draft_tokens=4, verify_budget=2)
    engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=60, temperature=1.0, seed=0)
    engine.run()
    estimator = drafter.fan_out.acceptance_estimator
    assert estimator.accepted > 20 and estimator.rejected == 0


@st.composite
def small_trees(draw, max_nodes=7):
    from specdec.contracts import Tree

    n = draw(st.integers(1, max_nodes))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    return Tree(tokens=torch.arange(n), parents=torch.tensor(parents))


@settings(max_examples=60, deadline=None)
@given(tree=small_trees(), history=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=6))
def test_a_tree_in_gain_order_verifies_the_best_nodes_first(tree, history):
    """Without scores a node is checked only after its parent and its earlier siblings: the first ``n`` nodes of
    :meth:`in_gain_order`'s tree gain as much as the best such ``n`` nodes found by brute force, for every ``n``."""
    est = AcceptanceEstimator()
    chain = DraftProposal(torch.arange(4))
    for nodes, accepted in history:
        est.observe(chain, nodes=nodes, accepted=min(accepted, nodes))
    proposal = DraftProposal(torch.arange(tree.num_nodes))
    raw = est.raw_gains(proposal, tree)[0]
    parents = tree.parents.tolist()
    earlier = [[j for j in range(i) if parents[j] == parents[i]] for i in range(len(parents))]
    best = [0.0] * (len(parents) + 1)
    for keep in itertools.product([False, True], repeat=len(parents)):
        if all(not k or ((p < 0 or keep[p]) and all(keep[j] for j in earlier[i])) for i, (k, p) in enumerate(zip(keep, parents))):
            n = sum(keep)
            best[n] = max(best[n], sum(g for g, k in zip(raw, keep) if k))
    moved, scores = est.in_gain_order(proposal, tree)
    assert scores is None
    gains = est.gains(proposal, moved)
    assert gains == est.raw_gains(proposal, moved)[0]  # falling already: the running minimum changes nothing
    assert sorted(gains) == sorted(raw)  # each node keeps its gain: siblings keep their order
    for n in range(len(parents) + 1):
        assert sum(gains[:n]) == pytest.approx(best[n], rel=1e-12, abs=1e-15)


def test_scores_move_with_their_nodes_and_a_node_never_gains_more_than_its_parent():
    from specdec.contracts import Tree

    tree = Tree(tokens=torch.tensor([3, 4, 5, 6]), parents=torch.tensor([-1, 0, -1, 2]))
    # the drafter's own tree (tokens: its first path), one confidence a node
    proposal = DraftProposal(torch.tensor([3, 4]), tree=tree, confidence=torch.tensor([0.5, 0.1, 0.4, 0.9]))
    est = AcceptanceEstimator()
    moved, scores = est.in_gain_order(proposal, tree)
    # node 3 (0.9) sits under node 2 (0.4): it gains 0.4 at most, and comes after it
    assert moved.tokens.tolist() == [3, 5, 6, 4] and moved.parents.tolist() == [-1, -1, 1, 0]
    assert scores == pytest.approx([0.5, 0.4, 0.9, 0.1])
    assert est.gains(proposal, moved, scores=scores) == pytest.approx([0.5, 0.4, 0.4, 0.1])


class DeepDecoyDrafter(TargetOracle):
    """Proposes a trie whose first path is three wrong tokens and whose second path is the target's next token:
    in node order the right token comes last."""

    def __init__(self):
        super().__init__(SEQ)

    def propose(self, context, max_tokens, *, sampling, generator):
        from specdec.contracts import Tree

        truth = self.truth(context, min(1, max_tokens))
        if max_tokens < 4:  # the request's last tokens
            return DraftProposal(truth)
        truth = int(truth[0])
        wrong = [(truth + i) % self.vocab_size for i in (1, 2, 3)]
        return DraftProposal(torch.tensor(wrong), tree=Tree.from_paths([wrong, [truth]]))


def test_a_verify_budget_takes_a_trie_s_likeliest_nodes_not_its_first():
    """A budget of 3 nodes: the wrong path's first two nodes and the right sibling (gain (1 - p) p), not the wrong
    path's third node (p^3): every round with room for drafts accepts the right token."""
    engine = Engine(TARGET, DeepDecoyDrafter, TreeVerifier(budget=8), max_batch=1, num_draft_tokens=4, verify_budget=3)
    rid = engine.add_request(torch.tensor(PROMPTS[0]), max_new_tokens=12)
    while engine.has_work:
        engine.step()
        assert sum(engine.last_allocation.values()) <= 3
    state = engine.request(rid)
    assert (state.rounds, state.accepted) == (6, 5)  # the last round has room for no draft
    ar = sd.generate(TARGET, torch.tensor([PROMPTS[0]]), max_new_tokens=12).tokens[0]
    assert torch.equal(engine.output(rid), ar)


def test_a_cut_round_whose_bonus_is_the_next_draft_reuses_the_drafts_after_it():
    """Greedy, with the target's own weights: a budget of 2 of 6 drafts accepts both and emits the third as the
    bonus, so SSD proposes the fourth to sixth again (nothing pre-drafted covers that outcome); it hears each round."""
    from specdec.drafters import ModelDrafter, SpeculativeSpeculationDrafter
    from specdec.drafters.ssd import GeometricFanOut

    target = tiny_target(seed=0)
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)), fan_out=GeometricFanOut(6))
    engine = Engine(target, drafter, max_batch=1, num_draft_tokens=6, verify_budget=2)
    rid = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=40)
    engine.run()
    assert torch.equal(engine.output(rid), sd.generate(target, torch.tensor([[1, 2, 3]]), max_new_tokens=40).tokens[0])
    stats, estimator = drafter.stats, drafter.fan_out.acceptance_estimator
    assert stats.tail_hits >= 5  # every other round: a tail of 3, cut after 2, leaves none
    # every round but the last (no proposal follows it to read its outcome), of at most 2 accepted drafts
    assert estimator.rejected == 0 and 0 <= engine.request(rid).accepted - estimator.accepted <= 2


def test_an_outcome_no_predraft_covers_teaches_the_fan_out_no_miss():
    """3 drafts, 2 verified, the target's own weights, greedy: each round accepts both and emits the third as its bonus;
    its one-draft tail is too short to reuse, and no pre-draft covers that bonus, so the miss-rate exponent learns
    nothing from it (it would otherwise fall towards 0 and spread the pre-drafts thin)."""
    from specdec.drafters import ModelDrafter, SpeculativeSpeculationDrafter
    from specdec.drafters.ssd import GeometricFanOut

    drafter = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)), fan_out=GeometricFanOut(16))
    engine = Engine(tiny_target(seed=0), drafter, max_batch=1, num_draft_tokens=3, verify_budget=2)
    engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=30)
    engine.run()
    assert drafter.stats.tail_hits == 0 and drafter.fan_out.acceptance_estimator.accepted >= 10
    assert drafter.fan_out.power_estimator.trials == {}


def test_a_chain_s_confidences_do_not_score_the_nodes_of_a_tree_built_from_its_laws():
    """TreeVerifier builds a best-first tree from a chain proposal's laws: its nodes are not the chain's, so the
    chain's confidences (same count here) read as their scores were another node's."""
    probs = torch.tensor([[0.50, 0.45, 0.05], [0.05, 0.50, 0.45]])
    proposal = DraftProposal(tokens=torch.tensor([0, 1]), draft_probs=probs, confidence=torch.tensor([0.9, 0.05]))
    tree = TreeVerifier(budget=2).build_tree(proposal, room=16)
    assert tree.parents.tolist() == [-1, -1] and tree.tokens.tolist() == [0, 1]  # two children of the root
    scores = AcceptanceEstimator.score_tensor(proposal, tree)
    torch.testing.assert_close(scores, tree.scores.float().exp())  # 0.50 and 0.45, not 0.9 and 0.05
    torch.testing.assert_close(AcceptanceEstimator.score_tensor(proposal), torch.tensor([0.9, 0.05]))  # the chain's own


class PerfectChainDrafter(TargetOracle):
    """Proposes the target's own greedy continuation: every node it drafts is accepted."""

    def __init__(self):
        super().__init__(SEQ)

    def propose(self, context, max_tokens, *, sampling, generator):
        return DraftProposal(self.truth(context, max_tokens))


def test_a_budget_below_the_drafting_requests_leaves_none_unverified_for_good():
    """Budget 2, three requests with perfect drafters: by gain the two that have learned their acceptance would win
    every round and the third, its estimator still at the prior, would wait until they finish; a request passed over
    for as many rounds as there are drafting requests gets its first node."""
    engine = Engine(TARGET, PerfectChainDrafter, max_batch=3, num_draft_tokens=4, verify_budget=2)
    prompt = torch.tensor(PROMPTS[0])
    ids = [engine.add_request(prompt.clone(), max_new_tokens=30) for _ in range(3)]
    streak = dict.fromkeys(ids, 0)
    longest = dict.fromkeys(ids, 0)
    while engine.has_work:
        engine.step()
        assert sum(engine.last_allocation.values()) <= 2
        for rid, nodes in engine.last_allocation.items():
            streak[rid] = 0 if nodes else streak[rid] + 1
            longest[rid] = max(longest[rid], streak[rid])
            assert engine.request(rid).passed_over <= streak[rid]  # a round with an empty draft is not passed over
    assert max(longest.values()) <= 3, longest
    ar = sd.generate(TARGET, prompt[None], max_new_tokens=30).tokens[0]
    assert all(torch.equal(engine.output(rid), ar) for rid in ids)
