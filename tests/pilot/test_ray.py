"""The Ray executor on a local Ray instance with two CPU workers (Ray is pinned in requirements-ci.txt)."""

import time

import pytest
import ray

from specdec.pilot.agents import Budget, SearchAgent, explore_all
from specdec.pilot.spec import SystemSpec


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_tasks_give_the_serial_results_in_job_order(local_ray):
    best = {"draft_length": 8, "ngram_order": 5}

    def evaluate(cand, base, effort):  # defined here so that Ray ships it by value
        return 2.0 if cand.num_draft_tokens == 8 or cand.drafter.get("max_ngram") == 5 else 1.1

    jobs = [(SearchAgent(evaluate), name, SystemSpec(), Budget(8)) for name in best]
    start = time.perf_counter()
    results = explore_all(jobs, executor="ray", num_gpus=0)
    assert time.perf_counter() - start < 180  # a hang guard with room for a loaded 2-core machine (63 s seen)
    assert [r.direction for r in results] == list(best)
    assert results[0].candidate.settings == {"num_draft_tokens": 8}
    assert results[1].candidate.settings == {"max_ngram": 5}
    assert [r.candidate.settings for r in results] == [r.candidate.settings for r in explore_all(jobs)]
