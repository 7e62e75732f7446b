"""Power of the token-forcing rate rule: tokens needed to detect a rise of the mismatch rate.

Simulates the checker's own rule (``specdec.forcing.rate_rule_fails``: lower Wilson 95% bound of
the candidate above the upper bound of the null) with binomial mismatch counts, candidate and null
scoring the same number of tokens, and finds by bisection the smallest token count with 80% power.
Also prints the false-alarm rate of the rule at a few sizes (candidate rate = null rate).

    python -m benchmarks.decode.forcing_power            # ~1 minute on a CPU; JSON to $OUT or .
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import provenance, provenance_line, write_json
from specdec.forcing import simulate_power, tokens_needed

NULL_RATES = [0.0, 1e-4, 1e-3, 1e-2]
RISES = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]


def main() -> int:
    # tokens_needed draws with seed 0, the false-alarm simulation with a generator seeded 1
    prov = provenance(seed=0)
    start = time.perf_counter()
    table = {}
    for r0 in NULL_RATES:
        for rise in RISES:
            table[(r0, rise)] = tokens_needed(r0, rise, power=0.8, trials=1000, seed=0)
    false_alarm = {}
    for r0 in (1e-3, 1e-2):
        for n in (10_000, 100_000, 1_000_000):
            false_alarm[(r0, n)] = simulate_power(r0, r0, n, trials=2000, generator=torch.Generator().manual_seed(1))
    elapsed = time.perf_counter() - start

    print(provenance_line(prov))
    print("tokens (candidate = null) for 80% power of the rate rule\n")
    print("| null rate \\ rise | " + " | ".join(f"+{r:g}" for r in RISES) + " |")
    print("|---|" + "---|" * len(RISES))
    for r0 in NULL_RATES:
        print(f"| {r0:g} | " + " | ".join(f"{table[(r0, r)]:,}" for r in RISES) + " |")
    print("\nfalse-alarm rate (candidate rate = null rate), 2000 trials\n")
    print("| null rate | 10k tokens | 100k tokens | 1M tokens |")
    print("|---|---|---|---|")
    for r0 in (1e-3, 1e-2):
        print(f"| {r0:g} | " + " | ".join(f"{false_alarm[(r0, n)]:.4f}" for n in (10_000, 100_000, 1_000_000)) + " |")
    print(f"\n({elapsed:.1f} s)")
    write_json(
        Path(os.environ.get("OUT", ".")) / "forcing_power.json",
        {
            "benchmark": "forcing_power",
            "power": 0.8,
            "trials": 1000,
            "tokens_needed": [{"null_rate": r0, "rise": r, "tokens": n} for (r0, r), n in table.items()],
            "false_alarm": [{"null_rate": r0, "tokens": n, "rate": v} for (r0, n), v in false_alarm.items()],
            "seconds": elapsed,
        },
        prov,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
