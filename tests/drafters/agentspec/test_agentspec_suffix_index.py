"""PartitionedSuffixIndex: lookups equal a brute-force scan of the streams; truncation equals never having appended."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.drafters.agentspec import PartitionedSuffixIndex

PARTS = [("a", 0, None), ("a", 0, "code"), ("b", 1, None)]


def brute_force(streams, suffix, partition, *, depth, max_candidates, max_ngram, min_ngram, cut):
    """Scan every stream position in insertion order; newest first; longest matching n wins."""
    for n in range(min(max_ngram, len(suffix)), min_ngram - 1, -1):
        hits = []
        for sid, (tokens, parts, _) in enumerate(streams):
            for p in range(max(n, 1), len(tokens) + 1):
                if tokens[p - n : p] != suffix[len(suffix) - n :]:
                    continue
                if partition is not None and parts[p] != partition:
                    continue
                hits.append((sid, p))
        found = []
        for sid, p in reversed(hits):
            tokens, parts, searchable_from = streams[sid]
            if p < searchable_from or p >= len(tokens):
                continue
            cont = []
            for q in range(p, min(p + depth, len(tokens))):
                if cut and q > p and parts[q] != parts[p]:
                    break
                cont.append(tokens[q])
            found.append(cont)
            if len(found) == max_candidates:
                break
        if found:
            return found
    return []


stream_strategy = st.lists(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(range(len(PARTS)))), min_size=0, max_size=25), min_size=1, max_size=3
)


def build(raw, searchable, max_ngram, min_ngram):
    index = PartitionedSuffixIndex(max_ngram=max_ngram, min_ngram=min_ngram)
    streams = []
    for k, stream in enumerate(raw):
        sid = index.new_stream(PARTS[0])
        for token, part in stream:
            index.append(sid, token, PARTS[part])
        start = min(searchable[k % len(searchable)], len(stream))
        index.streams[sid].searchable_from = start
        streams.append(([t for t, _ in stream], [PARTS[0]] + [PARTS[p] for _, p in stream], start))
    return index, streams


@given(
    stream_strategy,
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
    st.sampled_from([None] + PARTS),
    st.lists(st.integers(0, 5), min_size=1, max_size=3),
    st.integers(1, 4),
    st.booleans(),
)
def test_lookup_equals_brute_force(raw, suffix, partition, searchable, min_ngram, cut):
    max_ngram = min_ngram + 2
    index, streams = build(raw, searchable, max_ngram, min_ngram)
    got = index.continuations(suffix, partition, depth=5, max_candidates=3, cut_at_block_end=cut)
    want = brute_force(streams, suffix, partition, depth=5, max_candidates=3, max_ngram=max_ngram, min_ngram=min_ngram, cut=cut)
    assert got == want


@given(stream_strategy, st.integers(0, 30), st.lists(st.integers(0, 3), min_size=1, max_size=5))
def test_truncate_equals_never_appending(raw, keep, suffix):
    index, _ = build(raw, [0], 3, 1)
    last = len(index.streams) - 1
    keep = min(keep, len(raw[-1]))
    index.truncate(last, keep)
    fresh, _ = build(raw[:-1] + [raw[-1][:keep]], [0], 3, 1)
    for partition in [None] + PARTS:
        assert index.continuations(suffix, partition, depth=4, max_candidates=8) == fresh.continuations(
            suffix, partition, depth=4, max_candidates=8
        )
    assert index._entries == fresh._entries


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="min_ngram"):
        PartitionedSuffixIndex(max_ngram=1, min_ngram=2)
    index = PartitionedSuffixIndex()
    sid = index.new_stream(PARTS[0])
    with pytest.raises(ValueError, match="length"):
        index.truncate(sid, 1)
