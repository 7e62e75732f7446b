"""Distribution tests for decode loops: exact laws by enumeration, chi-square tests, sample sizes,
Markov targets and strategies.

From exact to statistical:

1. **Exact laws on tiny vocabularies** (:mod:`~specdec.testing.laws.exact`): the law of the next
   ``m`` tokens under plain decoding and under verification rounds, by enumeration.
2. **Chi-square tests on sampled runs** (:mod:`~specdec.testing.laws.chi2`): one sample against an
   exact law (:func:`one_sample_chi2`), two arms against each other (:func:`two_sample_chi2`), and the
   argmax-rate test. :mod:`~specdec.testing.laws.power` says how many samples a test needs
   (:func:`chi2_sample_size`); :mod:`~specdec.testing.laws.running` draws them
   (:func:`sample_continuations`); :mod:`~specdec.testing.laws.reporting` holds the outcomes.
3. **Generators of awkward cases** for hypothesis (:mod:`~specdec.testing.laws.strategies`).

:class:`MarkovTarget` (:mod:`~specdec.testing.laws.markov`) is a target whose logits are a table
lookup on the last ``order`` tokens, so the law of every run is known exactly and a thousand
speculative runs take seconds on a CPU. Worked example: ``docs/laws.md``.
"""

from specdec.testing.laws.chi2 import argmax_rate_test, one_sample_chi2, two_sample_chi2
from specdec.testing.laws.exact import (
    Law,
    autoregressive_law,
    chain_round,
    chain_round_law,
    enumerate_contexts,
    reference_chain_decide,
    speculative_law,
    total_variation,
    tree_round,
    tree_round_law,
)
from specdec.testing.laws.markov import MarkovDrafter, MarkovLaw, MarkovTarget
from specdec.testing.laws.power import chi2_power, chi2_sample_size
from specdec.testing.laws.reporting import ArgmaxRateResult, OneSampleResult, TwoSampleResult
from specdec.testing.laws.running import sample_continuations
from specdec.testing.laws.strategies import distribution_pairs, probability_vectors, trees

__all__ = [
    "ArgmaxRateResult",
    "Law",
    "MarkovDrafter",
    "MarkovLaw",
    "MarkovTarget",
    "OneSampleResult",
    "TwoSampleResult",
    "argmax_rate_test",
    "autoregressive_law",
    "chain_round",
    "chain_round_law",
    "chi2_power",
    "chi2_sample_size",
    "distribution_pairs",
    "enumerate_contexts",
    "one_sample_chi2",
    "probability_vectors",
    "reference_chain_decide",
    "sample_continuations",
    "speculative_law",
    "total_variation",
    "tree_round",
    "tree_round_law",
    "trees",
    "two_sample_chi2",
]
